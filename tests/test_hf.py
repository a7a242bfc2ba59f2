"""The Hugging Face surface: ``KimiK3VisionProcessor`` as the checkpoint's vision processors.

The checkpoint's members are transcribed here from their definitions
(``kimi_k3_vision_processing.py``, ``kimi_k25_vision_processing.py``, ``media_utils.py``,
``kimi_k3_processor.py``; reference-spec sections 3, 4, 9.1) and compared with ours:
``get_resize_config`` / ``media_tokens_calculator`` / ``make_image_prompt`` over many
sizes, ``resize_image`` bit for bit against Pillow's BICUBIC plus the checkpoint's
padding, the checkpoint's ``KimiK3Processor`` wrapper shape built through
``ProcessorMixin``'s own constructor, the messages, ``from_dict`` / ``to_dict``, the
lazy transformers import, ``return_tensors=None`` with a torch stand-in,
``split_video_chunks`` with a mecord stand-in, ``from_pretrained`` of a Hub repo id from
a pre-filled cache (offline), and ``examples/vllm_processor.py``.
"""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import subprocess
import sys
import types
import warnings
from collections.abc import Mapping

import kimi_k3_rs
import numpy as np
import pytest
from helpers import (
    K3_CFG,
    K25_CFG,
    REPO_DIR,
    alpha_pattern_rgba,
    assert_bit_equal,
    cfg,
    exact,
    mode_image,
    noise,
)
from kimi_k3_rs import hf
from kimi_k3_rs.hf import hub
from kimi_k3_rs.hf import outputs as hf_outputs
from PIL import Image
from reference import fill_transparent_bg_with, navit_resize_image

try:
    from transformers.image_processing_utils import BaseImageProcessor
    from transformers.image_processing_utils import BatchFeature as ImageBatchFeature
except Exception:  # noqa: BLE001 - absent or broken
    BaseImageProcessor = ImageBatchFeature = None
HAS_TRANSFORMERS = BaseImageProcessor is not None
#: The installed transformers' major version (0 when it is not installed).
TRANSFORMERS_MAJOR = int(sys.modules["transformers"].__version__.split(".")[0]) if HAS_TRANSFORMERS else 0
needs_transformers = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed")

PRESETS = {"k3": K3_CFG, "k25": K25_CFG}


# ---------------------------------------------------------------------------
# The checkpoint's members, transcribed from their definitions
# ---------------------------------------------------------------------------


def ckpt_navit_resize_video(w, h, nframes, avg_fps, sample_fps, ps, m, each_frame, side, total, max_frames, fixed):
    """``media_utils.py: navit_resize_video`` (K2.5)."""
    sample_fps = min(sample_fps, avg_fps)
    sampled = max(round(nframes * sample_fps / avg_fps), 1)
    if max_frames is not None:
        sampled = min(sampled, max_frames)
    if total is not None:
        each_frame = min(round(total / sampled), each_frame)
    ret = navit_resize_image(w, h, ps, m, each_frame, side, fixed)
    ret["sampled_nframes"] = sampled
    return ret


def ckpt_get_resize_config(media_proc_cfg, media, k25):
    """``KimiK3VisionProcessor.get_resize_config`` / ``KimiK25VisionProcessor.get_resize_config``."""
    c = media_proc_cfg
    if media["type"] == "image":
        w, h = media["image"].size
        ret = navit_resize_image(w, h, c["patch_size"], c["merge_kernel_size"], c["in_patch_limit"],
                                 c["patch_limit_on_one_side"], c["fixed_output_tokens"])
        ret["sampled_nframes"] = 1  # media_utils' navit_resize_image returns it too
        return ret
    if k25 and media["type"] == "video_chunk":
        width, height = media["video_chunk"][0].size
        each = c["in_patch_limit_each_frame"]
        if each is None:
            each = c["in_patch_limit"]
        return ckpt_navit_resize_video(width, height, len(media["video_chunk"]), 1.0, math.inf, c["patch_size"],
                                       c["merge_kernel_size"], each, c["patch_limit_on_one_side"],
                                       c["in_patch_limit_video"], None, c["fixed_output_tokens"])
    raise ValueError("Unsupported type: {}".format(media["type"]))


def ckpt_media_tokens_calculator(media_proc_cfg, media, k25):
    """``media_tokens_calculator``: ``ensure_media_type``'s check, then ``num_tokens``."""
    allowed = ("image", "video_chunk") if k25 else ("image",)
    if media["type"] not in allowed:
        raise ValueError(f"Unsupported media type: {media['type']}")
    return ckpt_get_resize_config(media_proc_cfg, media, k25)["num_tokens"]


def ckpt_make_image_prompt(width, height):
    """``KimiK3VisionProcessor.make_image_prompt``."""
    return f"<|media_begin|>image {width}x{height}" f"<|media_content|><|media_pad|><|media_end|>"


def ckpt_resize_image(media_proc_cfg, image, new_width, new_height, pad_width, pad_height):
    """``resize_image`` (``image_to_np(image, size, "resize", bg, stage)`` + ``np.pad``)."""
    assert isinstance(image, Image.Image), "image must be a PIL Image"
    image = image.resize((new_width, new_height), resample=Image.Resampling.BICUBIC)
    if media_proc_cfg.get("transparent_bg_fill_stage", "before_resize") == "after_resize":
        image = fill_transparent_bg_with(image, media_proc_cfg.get("transparent_bg_config"))
    image_np = np.asarray(image)
    return np.pad(image_np, ((0, pad_height), (0, pad_width), (0, 0)), mode="constant", constant_values=0)


def sizes_to_check():
    rng = np.random.default_rng(7)
    fixed = [(1, 1), (1, 9000), (9000, 1), (14, 14), (27, 29), (28, 28), (640, 480), (1920, 1080), (4000, 3000),
             (8366, 10), (10, 8366), (7168, 7168), (7169, 3), (300, 7600), (3583, 3584), (2048, 2048)]
    drawn = [tuple(int(v) for v in rng.integers(1, 9000, 2)) for _ in range(150)]
    small = [tuple(int(v) for v in rng.integers(1, 300, 2)) for _ in range(50)]
    return fixed + drawn + small


# ---------------------------------------------------------------------------
# sizing and prompts
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["k3", "k25", "k3-fixed", "k25-in-patch-limit"])
def test_get_resize_config_and_tokens_match_the_checkpoint(preset):
    media_proc_cfg = {"k3": K3_CFG, "k25": K25_CFG, "k3-fixed": cfg("kimi_k3", fixed_output_tokens=77),
                      "k25-in-patch-limit": cfg("kimi_k25", in_patch_limit=1000)}[preset]
    k25 = preset.startswith("k25")
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    assert processor.model_type == ("kimi_k25" if k25 else "kimi_k3")
    for w, h in sizes_to_check():
        media = {"type": "image", "image": Image.new("1", (w, h))}
        want = ckpt_get_resize_config(media_proc_cfg, media, k25)
        got = processor.get_resize_config(media)
        assert got == want and list(got) == list(want), (w, h)
        assert all(type(v) is int for v in got.values())
        tokens = processor.media_tokens_calculator(media)
        assert tokens == ckpt_media_tokens_calculator(media_proc_cfg, media, k25) and type(tokens) is int
    # any input preprocess takes is sized (the checkpoint needs a PIL image there)
    array = np.zeros((480, 640, 3), np.uint8)
    png = Image.new("RGB", (640, 480))
    assert processor.get_resize_config({"type": "image", "image": array}) == \
        ckpt_get_resize_config(media_proc_cfg, {"type": "image", "image": png}, k25)


@pytest.mark.parametrize("each_frame,total", [(4096, None), (None, None), (4096, 9000), (16384, 100000)])
def test_video_chunk_sizing_k25(each_frame, total):
    media_proc_cfg = cfg("kimi_k25", in_patch_limit_each_frame=each_frame, in_patch_limit_video=total)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    for n in (1, 2, 3, 4):
        for w, h in [(1280, 720), (1920, 1080), (3840, 2160), (30, 20), (640, 4000)]:
            chunk = {"type": "video_chunk", "video_chunk": [Image.new("1", (w, h))] * n}
            assert processor.get_resize_config(chunk) == ckpt_get_resize_config(media_proc_cfg, chunk, True)
            assert processor.media_tokens_calculator(chunk) == ckpt_media_tokens_calculator(media_proc_cfg, chunk, True)
    # video-spec section 5: a 1280x720 frame, 1075 tokens per chunk under the published K2.5 config
    if each_frame == 4096 and total is None:
        chunk = {"type": "video_chunk", "video_chunk": [Image.new("1", (1280, 720))] * 4}
        assert processor.media_tokens_calculator(chunk) == 1075


def test_make_image_prompt_and_chunk_prompt():
    for w, h in sizes_to_check()[:40]:
        assert kimi_k3_rs.KimiK3VisionProcessor.make_image_prompt(w, h) == ckpt_make_image_prompt(w, h)
    processor = kimi_k3_rs.KimiK3VisionProcessor(K3_CFG)
    assert processor.make_image_prompt(640, 480) == \
        "<|media_begin|>image 640x480<|media_content|><|media_pad|><|media_end|>"
    assert kimi_k3_rs.KimiK3VisionProcessor.make_chunk_prompt("00:00:02.466") == \
        "00:00:02.466<|media_begin|>video<|media_content|><|media_pad|><|media_end|>"


def test_transparent_bg_members():
    k3 = kimi_k3_rs.KimiK3VisionProcessor(K3_CFG)
    bg = k3._transparent_bg_config
    assert (bg.pattern, bg.chessboard_square_size, bg.chessboard_square_on_top_left,
            bg.chessboard_white_value, bg.chessboard_gray_value) == ("chessboard", 8, True, 255, 180)
    assert k3._transparent_bg_fill_stage == "after_resize"
    k25 = kimi_k3_rs.KimiK3VisionProcessor(K25_CFG)
    assert k25._transparent_bg_config is None and k25._transparent_bg_fill_stage == "before_resize"
    # missing keys take the checkpoint dataclass's defaults (black, 16, True, 255, 200)
    partial = kimi_k3_rs.KimiK3VisionProcessor(cfg("kimi_k3", transparent_bg_config={}))._transparent_bg_config
    assert (partial.pattern, partial.chessboard_square_size, partial.chessboard_gray_value) == ("black", 16, 200)


# ---------------------------------------------------------------------------
# resize_image, bit for bit
# ---------------------------------------------------------------------------

RESIZE_INPUTS = {
    "RGB": lambda w, h: noise(w, h, "RGB", 1),
    "RGBA": lambda w, h: alpha_pattern_rgba(w, h, 2),
    "LA": lambda w, h: alpha_pattern_rgba(w, h, 3).convert("LA"),
    "L": lambda w, h: noise(w, h, "L", 4),
    "P": lambda w, h: mode_image("P+bytes_trns", w, h, 5),
    "1": lambda w, h: mode_image("1", w, h, 6),
    "CMYK": lambda w, h: mode_image("CMYK", w, h, 7),
    "L+trns": lambda w, h: mode_image("L+trns", w, h, 8),
    "I;16": lambda w, h: mode_image("I;16", w, h, 9),
}


def outcome(call):
    """``("ok", array)`` or ``("raised", exception class)``."""
    try:
        return "ok", call()
    except Exception as exc:  # noqa: BLE001 - the class is compared
        return "raised", type(exc)


@pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")
@pytest.mark.parametrize("kind", list(RESIZE_INPUTS))
@pytest.mark.parametrize("preset", ["k3", "k25", "k3-before", "k3-white"])
def test_resize_image_is_the_checkpoints(kind, preset):
    media_proc_cfg = {"k3": K3_CFG, "k25": K25_CFG, "k3-before": cfg("kimi_k3", transparent_bg_fill_stage="before_resize"),
                      "k3-white": cfg("kimi_k3", transparent_bg_config={"pattern": "white"})}[preset]
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    for w, h in [(301, 203), (40, 700), (5000, 90), (57, 57)]:
        image = RESIZE_INPUTS[kind](w, h)
        sizing = kimi_k3_rs.navit_resize_config(w, h, 14, 2, 1500, 512)  # a down-scale of every image
        for args in [(sizing["new_width"], sizing["new_height"], sizing["pad_width"], sizing["pad_height"]),
                     (w, h, 3, 0),  # same size: no resample
                     (w + 5, max(1, h // 2), 0, 1),  # one side up: Pillow's own resize
                     (max(1, w // 3), max(1, h // 7), 0, 0)]:
            want = outcome(lambda: ckpt_resize_image(media_proc_cfg, image, *args))
            got = outcome(lambda: processor.resize_image(image, *args))
            assert got[0] == want[0], (kind, (w, h), args, got, want)
            if want[0] == "ok":
                assert_bit_equal(got[1], want[1], f"{kind} {w}x{h} {args}")
            else:
                assert got[1] is want[1], (kind, args, got, want)


def test_resize_image_shapes_and_errors():
    k25 = kimi_k3_rs.KimiK3VisionProcessor(K25_CFG)
    k3 = kimi_k3_rs.KimiK3VisionProcessor(K3_CFG)
    rgba = alpha_pattern_rgba(300, 200, 1)
    assert k25.resize_image(rgba, 150, 100, 18, 12).shape == (112, 168, 4)  # alpha kept, as the checkpoint
    assert k3.resize_image(rgba, 150, 100, 18, 12).shape == (112, 168, 3)  # composited after the resize
    with pytest.raises(AssertionError, match=exact("image must be a PIL Image")):
        k3.resize_image(np.zeros((20, 20, 3), np.uint8), 10, 10, 0, 0)
    with pytest.raises(ValueError):  # numpy's pad of a 2-D array, as in the checkpoint
        k25.resize_image(noise(30, 30, "L", 0), 20, 20, 8, 8)


# ---------------------------------------------------------------------------
# messages: the checkpoint's in the HF surface, sglang's elsewhere
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["video", "audio", "video_chunk", "text"])
def test_unsupported_media_type_k3(kind):
    processor = kimi_k3_rs.KimiK3VisionProcessor(K3_CFG)
    item = {"type": kind, kind: "x"}
    for call in (lambda: processor.preprocess([item]), lambda: processor([noise(9, 9), item]),
                 lambda: processor.media_tokens_calculator(item)):
        with pytest.raises(ValueError, match=exact(f"Unsupported media type: {kind}")) as info:
            call()
        assert type(info.value) is ValueError
    with pytest.raises(ValueError, match=exact(f"Unsupported type: {kind}")):
        processor.get_resize_config(item)
    # sglang's message stays in preprocess() and the deferred flow
    sglang = f"Unsupported Kimi-K3 encoder media item: {item}"
    with pytest.raises(ValueError, match=exact(sglang)):
        kimi_k3_rs.preprocess([item], K3_CFG)
    with pytest.raises(ValueError, match=exact(sglang)):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([item], processor)


def test_unsupported_media_type_k25():
    processor = kimi_k3_rs.KimiK3VisionProcessor(K25_CFG)
    with pytest.raises(ValueError, match=exact("Unsupported media type: video")):
        processor.preprocess([{"type": "video", "video": "clip.mp4"}])
    with pytest.raises(ValueError, match=exact("Unsupported type: video")):
        processor.get_resize_config({"type": "video", "video": "clip.mp4"})
    chunk = {"type": "video_chunk", "video_chunk": [noise(64, 48)]}
    assert processor.media_tokens_calculator(chunk) == 6  # a K2.5 chunk is taken (84x56 padded: 3x2)


def test_bad_image_data_keeps_the_checkpoint_text():
    processor = kimi_k3_rs.KimiK3VisionProcessor(K3_CFG)
    for call in (lambda: processor.media_tokens_calculator({"type": "image", "image": 3.5}),
                 lambda: processor.preprocess([{"type": "image", "image": 3.5}])):
        with pytest.raises(ValueError, match=exact("Unsupported data type: <class 'float'>")):
            call()


# ---------------------------------------------------------------------------
# the checkpoint's classes as far as config and calls go (the oracle of the tests below)
# ---------------------------------------------------------------------------

#: A K2.5 config as written with its ``null`` keys left out: the K2.5 checkpoint's class
#: takes it (its ``__init__`` reads only ``temporal_merge_kernel_size``); its keys alone
#: do not say K2.5 (no ``in_patch_limit_video``), the class its file names does.
K25_WITHOUT_NULLS = {key: value for key, value in K25_CFG.items() if value is not None}

CHECKPOINT_NAMES = {"k3": "KimiK3VisionProcessor", "k25": "KimiK25VisionProcessor"}
AUTO_MAPS = {
    "k3": {"AutoImageProcessor": "kimi_k3_vision_processing.KimiK3VisionProcessor",
           "AutoProcessor": "kimi_k3_processor.KimiK3Processor"},
    "k25": {"AutoImageProcessor": "kimi_k25_vision_processing.KimiK25VisionProcessor",
            "AutoProcessor": "kimi_k25_processor.KimiK25Processor"},
}


def checkpoint_vision_class(preset):
    """The checkpoint's ``KimiK3VisionProcessor`` (``kimi_k3_vision_processing.py``) or
    ``KimiK25VisionProcessor`` (``kimi_k25_vision_processing.py``), transcribed from their
    definitions for what these tests compare: a ``BaseImageProcessor`` of the installed
    transformers whose ``__init__(media_proc_cfg, **kwargs)`` hands ``kwargs`` to
    ``BaseImageProcessor.__init__`` and keeps ``media_proc_cfg`` (K2.5 also
    ``num_frames_per_chunk = media_proc_cfg["temporal_merge_kernel_size"]``); ``__repr__``;
    ``to_dict`` (transformers' plus ``media_proc_cfg``, less ``media_processor``);
    ``from_dict`` (``media_proc_cfg`` popped, every other key and keyword to the
    constructor); ``to_json_string`` (top-level ``tolist``, JSON sorted, indent 2, a
    newline). ``__call__`` and ``from_pretrained`` are transformers' own, inherited.
    ``preprocess`` has the checkpoint's signature and returns what it was given, so a
    call shows what transformers' ``__call__`` passes on."""
    name = CHECKPOINT_NAMES[preset]
    k25 = preset == "k25"

    class Checkpoint(BaseImageProcessor):
        model_type = "kimi_k25" if k25 else "kimi_k3"

        def __init__(self, media_proc_cfg, **kwargs):
            super().__init__(**kwargs)
            self.media_proc_cfg = media_proc_cfg
            if k25:
                self.num_frames_per_chunk = media_proc_cfg["temporal_merge_kernel_size"]

        def preprocess(self, medias, return_tensors=None):
            return {"medias": medias, "return_tensors": return_tensors}

        def __repr__(self):
            return f"{name}(media_proc_cfg={self.media_proc_cfg})"

        def to_dict(self):
            output = super().to_dict()
            output["media_proc_cfg"] = self.media_proc_cfg
            output.pop("media_processor", None)
            return output

        @classmethod
        def from_dict(cls, config_dict, **kwargs):
            config = config_dict.copy()
            media_proc_cfg = config.pop("media_proc_cfg", {})
            return cls(media_proc_cfg=media_proc_cfg, **config, **kwargs)

        def to_json_string(self):
            dictionary = self.to_dict()
            for key, value in dictionary.items():
                if hasattr(value, "tolist"):
                    dictionary[key] = value.tolist()
            return json.dumps(dictionary, indent=2, sort_keys=True) + "\n"

    Checkpoint.__name__ = Checkpoint.__qualname__ = name
    for attr, member in vars(Checkpoint).items():  # messages name KimiK3VisionProcessor.preprocess()
        if callable(member):
            member.__qualname__ = f"{name}.{attr}"
    return Checkpoint


def attributes(processor):
    """What a processor holds beside its config, as the checkpoint's: ``__dict__`` less
    ``media_proc_cfg`` (the checkpoint's) or the processor's own attributes (ours)."""
    own = {"media_proc_cfg", *hf.processor._OWN_ATTRIBUTES}
    return {key: value for key, value in vars(processor).items() if key not in own}


def assert_same_processor(ours, checkpoint):
    """``ours`` is what ``checkpoint`` is: the same ``to_dict``, ``to_json_string``,
    ``repr``, attributes (``num_frames_per_chunk``, ``_processor_class``, the kept keys)."""
    assert ours.to_dict() == checkpoint.to_dict()
    assert ours.to_json_string() == checkpoint.to_json_string()
    assert repr(ours) == repr(checkpoint)
    assert attributes(ours) == attributes(checkpoint)
    assert ours.model_type == checkpoint.model_type and ours.media_proc_cfg == checkpoint.media_proc_cfg


def checkpoint_states(preset):
    """Checkpoint processors as users hold them: (id, processor). Built new; loaded from
    the published file (``auto_map``, ``processor_class`` beside ``media_proc_cfg``);
    loaded with transformers-style keys, ``None`` among them (which transformers 5's
    ``to_dict`` leaves out, 4.x keeps); with an attribute set afterwards; and, for K2.5,
    from a config whose keys alone do not say K2.5."""
    ckpt = checkpoint_vision_class(preset)
    spec = PRESETS[preset]
    published = ckpt.from_dict({"auto_map": AUTO_MAPS[preset], "media_proc_cfg": spec,
                                "processor_class": AUTO_MAPS[preset]["AutoProcessor"].split(".")[1]})
    keyed = ckpt.from_dict({"media_proc_cfg": spec, "do_resize": True, "size": {"height": 28}, "resample": None,
                            "feature_extractor_type": "old"}, note=[1, 2])
    later = ckpt(spec)
    later.chat_note = {"set": "afterwards"}
    states = [("new", ckpt(spec)), ("published file", published), ("transformers keys", keyed),
              ("set afterwards", later)]
    if preset == "k25":
        states.append(("K2.5 config without its null keys", ckpt(K25_WITHOUT_NULLS)))
    return states


# ---------------------------------------------------------------------------
# processor(images, ...): transformers' BaseImageProcessor.__call__, as the checkpoint's
# ---------------------------------------------------------------------------

CALLS = {
    "images=": ((), {"images": "IMAGES", "return_tensors": "np"}),
    "positional": (("IMAGES",), {"return_tensors": "np"}),
    "one image": (("IMAGE",), {"return_tensors": "np"}),
    "return_tensors positional": (("IMAGES", "np"), {}),  # 5.x passes it on, 4.x refuses
    "three positional": (("IMAGES", "np", "pt"), {}),
    "medias=": ((), {"medias": "IMAGES", "return_tensors": "np"}),
    "no images": ((), {"return_tensors": "np"}),
    "an unknown keyword": (("IMAGES",), {"return_tensors": "np", "do_resize": True}),
    "an empty list": (([],), {"return_tensors": "np"}),
}


def call_values(args, kwargs):
    """``CALLS``' placeholders as images (a fresh list each time)."""
    images = [noise(60, 40, "RGB", 1), alpha_pattern_rgba(33, 90, 2)]
    value = {"IMAGES": images, "IMAGE": images[0]}
    return ([value.get(a, a) if isinstance(a, str) else a for a in args],
            {k: value.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()})


def outcome_text(call, name):
    """``("ok", result)`` or ``("raised", class, message with the class name as ours)``."""
    try:
        return "ok", call()
    except Exception as exc:  # noqa: BLE001 - the class and message are compared
        return "raised", type(exc), str(exc).replace(name, "KimiK3VisionProcessor")


@needs_transformers
@pytest.mark.parametrize("preset", ["k3", "k25"])
@pytest.mark.parametrize("call", list(CALLS))
def test_call_is_transformers_call_as_the_checkpoints(preset, call):
    """``processor(...)`` passes to ``preprocess`` what the checkpoint's does, or raises
    its error, under the installed transformers (4.x or 5.x): ``images=`` works (it
    raised ``TypeError: ... unexpected keyword argument 'images'``)."""
    ours = kimi_k3_rs.KimiK3VisionProcessor(PRESETS[preset])
    checkpoint = checkpoint_vision_class(preset)(PRESETS[preset])
    args, kwargs = call_values(*CALLS[call])
    want = outcome_text(lambda: checkpoint(*args, **kwargs), CHECKPOINT_NAMES[preset])
    got = outcome_text(lambda: ours(*args, **kwargs), CHECKPOINT_NAMES[preset])
    assert got[0] == want[0], (got, want)
    if want[0] == "raised":
        assert got[1:] == want[1:]
        return
    given = want[1]
    expected = ours.preprocess(given["medias"], return_tensors=given["return_tensors"])
    assert type(got[1]) is type(expected) and set(got[1].keys()) == set(expected.keys())
    for key in expected:
        assert_bit_equal(got[1][key], expected[key], key)
    if call == "images=":  # the pixels are preprocess's, which are the reference's
        assert_bit_equal(got[1]["pixel_values"],
                         kimi_k3_rs.preprocess(args[0] if args else kwargs["images"], PRESETS[preset])["pixel_values"])


def test_call_without_transformers_is_transformers_5s():
    """The class without transformers (``kimi_k3_rs.hf``'s, which ``kimi_k3_rs``
    resolves to when transformers cannot be imported) calls as transformers 5 does:
    ``preprocess(images, *args, **kwargs)``."""
    processor = hf.KimiK3VisionProcessor(K3_CFG)
    images = [noise(60, 40, "RGB", 1), alpha_pattern_rgba(33, 90, 2)]
    want = kimi_k3_rs.preprocess(images, K3_CFG)
    for out in (processor(images=images, return_tensors="np"), processor(images, "np"),
                processor(images, return_tensors="np")):
        assert_bit_equal(out["pixel_values"], want["pixel_values"])
        assert_bit_equal(out["grid_thws"], want["grid_thws"], "grid_thws")
    assert_bit_equal(processor(images[0], return_tensors="np")["grid_thws"], want["grid_thws"][:1], "grid_thws")
    with pytest.raises(TypeError, match="'images'"):
        processor(medias=images)
    with pytest.raises(TypeError, match=exact("KimiK3VisionProcessor.preprocess() got an unexpected keyword "
                                              "argument 'do_resize'")):
        processor(images, return_tensors="np", do_resize=True)


# ---------------------------------------------------------------------------
# from_dict / from_pretrained / to_dict / to_json_string / repr, against the checkpoint's
# ---------------------------------------------------------------------------


@needs_transformers
@pytest.mark.parametrize("preset", ["k3", "k25"])
def test_checkpoint_to_dict_loads_and_round_trips(preset, tmp_path):
    """Every checkpoint state's ``to_dict()`` loads through our ``from_dict``, its
    ``to_json_string()`` through our ``from_pretrained``, and gives what the
    checkpoint's own ``from_dict`` / ``from_pretrained`` give; ours writes back what the
    checkpoint writes, and the checkpoint loads ours. (K2.5's ``to_dict`` holds
    ``num_frames_per_chunk``, 4.x's ``_processor_class``: both were refused.)"""
    public = kimi_k3_rs.KimiK3VisionProcessor
    for state, checkpoint in checkpoint_states(preset):
        ckpt_class = type(checkpoint)
        # from_dict of the checkpoint's to_dict
        ours = public.from_dict(checkpoint.to_dict())
        assert_same_processor(ours, ckpt_class.from_dict(checkpoint.to_dict()))
        # from_pretrained of the checkpoint's to_json_string
        folder = tmp_path / preset / state.replace(" ", "_")
        folder.mkdir(parents=True)
        (folder / "preprocessor_config.json").write_text(checkpoint.to_json_string())
        ours = public.from_pretrained(folder)
        assert_same_processor(ours, ckpt_class.from_pretrained(folder))
        # our output, read back by the checkpoint and by us
        assert_same_processor(ours, ckpt_class.from_dict(ours.to_dict()))
        assert_same_processor(public.from_dict(json.loads(ours.to_json_string())),
                              ckpt_class.from_dict(json.loads(ours.to_json_string())))
        ours.save_pretrained(tmp_path / "saved" / preset / state.replace(" ", "_"))
        assert_same_processor(public.from_pretrained(tmp_path / "saved" / preset / state.replace(" ", "_")),
                              ckpt_class.from_pretrained(tmp_path / "saved" / preset / state.replace(" ", "_")))
        # and it is the same processor: same config, same pixels
        assert ours.media_proc_cfg == checkpoint.media_proc_cfg


@needs_transformers
@pytest.mark.parametrize("preset", ["k3", "k25"])
def test_new_processor_is_the_checkpoints(preset):
    """A processor built from the config alone: ``to_dict`` / ``to_json_string`` /
    ``repr`` / attributes as the checkpoint's under the installed transformers (4.x:
    ``_processor_class: None`` in both; K2.5: ``num_frames_per_chunk``); keywords beside
    the config are kept as attributes, as the checkpoint keeps them."""
    checkpoint = checkpoint_vision_class(preset)
    spec = PRESETS[preset]
    assert_same_processor(kimi_k3_rs.KimiK3VisionProcessor(spec), checkpoint(spec))
    kept = {"do_resize": True, "size": 3, "processor_class": "KimiK3Processor", "note": None}
    assert_same_processor(kimi_k3_rs.KimiK3VisionProcessor(spec, **kept), checkpoint(spec, **kept))
    assert_same_processor(kimi_k3_rs.KimiK3VisionProcessor.from_dict({"media_proc_cfg": spec}, **kept),
                          checkpoint.from_dict({"media_proc_cfg": spec}, **kept))
    # a name transformers' class holds: 4.x's read-only is_fast cannot be set (AttributeError
    # in both), 5.x has none and keeps it
    want = outcome(lambda: checkpoint(spec, is_fast=True))
    got = outcome(lambda: kimi_k3_rs.KimiK3VisionProcessor(spec, is_fast=True))
    assert got[0] == want[0] == ("raised" if TRANSFORMERS_MAJOR == 4 else "ok")
    if want[0] == "ok":
        assert_same_processor(got[1], want[1])
    else:
        assert got[1] is want[1] is AttributeError


@needs_transformers
def test_k25_processor_reprs_as_the_checkpoints():
    """A K2.5 processor reprs as ``KimiK25VisionProcessor(...)`` and acts as K2.5 when
    its config file names K2.5's class (``image_processor_type``, written by the
    checkpoint's ``to_dict``; ``auto_map``, in the published file), whatever keys the
    config has (a K2.5 config written without its null keys reprd as K3's)."""
    checkpoint = checkpoint_vision_class("k25")(K25_WITHOUT_NULLS)
    for config_dict in (checkpoint.to_dict(), {"auto_map": AUTO_MAPS["k25"], "media_proc_cfg": K25_WITHOUT_NULLS}):
        ours = kimi_k3_rs.KimiK3VisionProcessor.from_dict(config_dict)
        assert repr(ours) == repr(checkpoint) == f"KimiK25VisionProcessor(media_proc_cfg={K25_WITHOUT_NULLS})"
        assert ours.model_type == "kimi_k25" and ours.num_frames_per_chunk == 4
        assert ours.to_dict()["image_processor_type"] == "KimiK25VisionProcessor"
        chunk = {"type": "video_chunk", "video_chunk": [noise(64, 48)]}
        with pytest.raises(kimi_k3_rs.ConfigError, match="has no video keys"):  # K2.5's chunk keys are missing
            ours.media_tokens_calculator(chunk)
    # the config alone goes by its keys; K3's class named in the file wins over them
    assert repr(kimi_k3_rs.KimiK3VisionProcessor(K25_WITHOUT_NULLS)).startswith("KimiK3VisionProcessor(")
    named_k3 = kimi_k3_rs.KimiK3VisionProcessor.from_dict({"auto_map": AUTO_MAPS["k3"], "media_proc_cfg": K25_CFG})
    assert repr(named_k3) == f"KimiK3VisionProcessor(media_proc_cfg={K25_CFG})"
    assert not hasattr(named_k3, "num_frames_per_chunk")


@pytest.mark.parametrize("cls", ["public", "without transformers"])
@pytest.mark.parametrize("preset", ["k3", "k25"])
def test_dict_round_trip(preset, cls):
    """``to_dict`` / ``to_json_string`` / ``from_dict`` of ours, with transformers or
    without (the class without it keeps keys as attributes and drops
    ``processor_class``, as transformers 5); the options go to the constructor, not to
    ``to_dict``; names of our own members are refused."""
    cls = kimi_k3_rs.KimiK3VisionProcessor if cls == "public" else hf.KimiK3VisionProcessor
    spec = PRESETS[preset]
    name = CHECKPOINT_NAMES[preset]
    transformers_4 = cls is not hf.KimiK3VisionProcessor and TRANSFORMERS_MAJOR == 4
    base = {"_processor_class": None} if transformers_4 else {}
    k25 = {"num_frames_per_chunk": 4} if preset == "k25" else {}
    processor = cls(spec)
    assert processor.to_dict() == {**base, "image_processor_type": name, "media_proc_cfg": spec, **k25}
    text = processor.to_json_string()
    assert text.endswith("\n") and json.loads(text) == processor.to_dict()
    assert text == json.dumps(processor.to_dict(), indent=2, sort_keys=True) + "\n"
    assert repr(processor) == f"{name}(media_proc_cfg={spec})"
    checkpoint_file = {"auto_map": AUTO_MAPS[preset], "processor_class": "KimiK3Processor",
                       "num_frames_per_chunk": 99, **processor.to_dict()}
    again = cls.from_dict(checkpoint_file, do_resize=True)
    assert type(again) is cls and again.media_proc_cfg == spec
    # 4.x: processor_class is kept as _processor_class, then the dict's own _processor_class
    # (None) is set over it; K2.5 sets num_frames_per_chunk from the config: as the checkpoint's
    assert again.to_dict() == {**base, "auto_map": AUTO_MAPS[preset], "do_resize": True, "image_processor_type": name,
                               "media_proc_cfg": spec, "num_frames_per_chunk": 4 if k25 else 99}
    assert again.do_resize is True and again.auto_map == AUTO_MAPS[preset]
    half = cls.from_dict({"media_proc_cfg": spec, "dtype": "float16", "num_threads": 1}, num_threads=2)
    assert half.options.dtype == "float16" and half.options.num_threads == 2
    assert "dtype" not in half.to_dict() and "num_threads" not in half.to_dict()
    # names of our own members are not kept (the checkpoint's class would shadow them)
    for own in ("model_type", "config", "options", "checkpoint_flavour", "preprocess", "__class__"):
        with pytest.raises(TypeError, match=exact(f"KimiK3VisionProcessor.__init__() got an unexpected keyword "
                                                  f"argument '{own}'")):
            cls.from_dict({"media_proc_cfg": spec, own: 1})
    with pytest.raises(ValueError, match="missing deferred-preprocessing config"):
        cls.from_dict({})


# ---------------------------------------------------------------------------
# the class: lazy transformers import, BaseImageProcessor subclass
# ---------------------------------------------------------------------------

LAZY_SCRIPT = r"""
import sys
import kimi_k3_rs
assert "transformers" not in sys.modules, "import kimi_k3_rs imported transformers"
cls = kimi_k3_rs.KimiK3VisionProcessor
print(cls.__module__, cls.__qualname__, [c.__name__ for c in cls.__mro__])
print("transformers" in sys.modules)
"""


@pytest.mark.parametrize("transformers", ["as installed", "blocked"])
def test_import_is_lazy_and_the_class_follows_transformers(tmp_path, transformers):
    env = dict(os.environ)
    if transformers == "blocked":
        shim = tmp_path / "shim" / "transformers"
        shim.mkdir(parents=True)
        (shim / "__init__.py").write_text('raise ImportError("transformers blocked by the test")\n')
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim.parent), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", LAZY_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    if transformers == "as installed" and HAS_TRANSFORMERS:
        assert lines[0].startswith("kimi_k3_rs KimiK3VisionProcessor") and "BaseImageProcessor" in lines[0]
        assert lines[1] == "True"
    else:
        assert lines[0].startswith("kimi_k3_rs.hf KimiK3VisionProcessor") and "BaseImageProcessor" not in lines[0]


HF_UNLOADED_SCRIPT = r"""
import sys
import numpy as np
import kimi_k3_rs
loaded = sorted(m for m in sys.modules if m.startswith("kimi_k3_rs.hf"))
assert not loaded, f"import kimi_k3_rs imported {loaded}"
image = np.arange(30 * 40 * 3, dtype=np.uint8).reshape(30, 40, 3)
out = kimi_k3_rs.KimiK3VisionProcessor(kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG).preprocess([image], return_tensors="np")
want = kimi_k3_rs.preprocess([image], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
assert out["pixel_values"].tobytes() == want["pixel_values"].tobytes()
assert out["grid_thws"].tolist() == want["grid_thws"].tolist()
print(out["grid_thws"].tolist(), "kimi_k3_rs.hf" in sys.modules, kimi_k3_rs.hf.PREPROCESSOR_CONFIG_NAME)
"""


def test_import_loads_no_hf_module_until_first_use():
    """``import kimi_k3_rs`` imports no module of :mod:`kimi_k3_rs.hf`; the processor's first
    lookup does, and it then gives ``preprocess``'s bits (a fresh interpreter: this one has it)."""
    proc = subprocess.run([sys.executable, "-c", HF_UNLOADED_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    want = kimi_k3_rs.preprocess([np.zeros((30, 40, 3), np.uint8)], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)["grid_thws"].tolist()
    assert proc.stdout.split("\n")[0] == f"{want} True preprocessor_config.json"


def test_public_class_is_a_subclass_of_the_plain_one():
    cls = kimi_k3_rs.KimiK3VisionProcessor
    assert cls is kimi_k3_rs.KimiK3VisionProcessor  # resolved once
    assert issubclass(cls, hf.KimiK3VisionProcessor)
    assert "KimiK3VisionProcessor" in dir(kimi_k3_rs)
    assert pickle.loads(pickle.dumps(cls)) is cls  # the class pickles by reference to kimi_k3_rs
    if HAS_TRANSFORMERS:
        assert issubclass(cls, BaseImageProcessor) and cls is not hf.KimiK3VisionProcessor
        out = cls(K3_CFG).preprocess([noise(40, 30)], return_tensors="np")
        assert type(out) is ImageBatchFeature and set(out.data) == {"pixel_values", "grid_thws"}
    else:
        assert cls is hf.KimiK3VisionProcessor


# ---------------------------------------------------------------------------
# the checkpoint's KimiK3Processor wrapper shape, through ProcessorMixin's constructor
# ---------------------------------------------------------------------------


def ckpt_ensure_media_type(media, transparent_bg_config, transparent_bg_fill_stage):
    """K3 ``media_utils.py: ensure_media_type`` for PIL images (``_to_pil``)."""
    if media["type"] != "image":
        raise ValueError(f"Unsupported media type: {media['type']}")
    if transparent_bg_fill_stage == "before_resize":
        bg = transparent_bg_config
        media["image"] = fill_transparent_bg_with(media["image"], None if bg is None else vars(bg) if not
                                                  isinstance(bg, Mapping) else bg)
    return media


def checkpoint_processor_class():
    """A local ``ProcessorMixin`` with the checkpoint's ``KimiK3Processor`` shape."""
    from transformers.feature_extraction_utils import BatchFeature
    from transformers.processing_utils import ProcessorMixin

    class KimiK3Processor(ProcessorMixin):
        attributes = ["image_processor", "tokenizer"]
        valid_kwargs = ["chat_template"]
        image_processor_class = "AutoImageProcessor"
        tokenizer_class = "AutoTokenizer"

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(image_processor, tokenizer, chat_template=chat_template)
            self.media_processor = image_processor
            self.image_placeholder = "<|kimi_image_placeholder|>"

        def update_raw_text(self, text, image_prompts):
            parts = text.split(self.image_placeholder)
            assert len(parts) == len(image_prompts) + 1
            return "".join(p + q for p, q in zip(parts, image_prompts)) + parts[-1]

        def preprocess_medias(self, medias):
            updated, prompts = [], []
            for media in medias:
                if media["type"] != "image":
                    raise ValueError(f"unsupported media type: {media['type']}")
                updated.append(media)
                img = ckpt_ensure_media_type(
                    media,
                    transparent_bg_config=self.media_processor._transparent_bg_config,
                    transparent_bg_fill_stage=self.media_processor._transparent_bg_fill_stage,
                )["image"]
                w, h = img.size
                prompts.append(self.media_processor.make_image_prompt(w, h))
            return updated, prompts

        def __call__(self, messages=None, medias=None, text=None, return_tensors="pt", **kwargs):
            updated, prompts = self.preprocess_medias(medias)
            preprocessed = self.media_processor.preprocess(updated, return_tensors=return_tensors)
            text = self.update_raw_text(text, prompts)
            text_inputs = self.tokenizer(text, return_tensors=return_tensors)
            return BatchFeature(data={**text_inputs, **preprocessed.data})

    return KimiK3Processor


def small_tokenizer():
    """A word-level fast tokenizer built in memory (no files, no network)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "describe": 1, "and": 2}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


@needs_transformers
@pytest.mark.parametrize("preset", ["k3", "k3-before", "k25"])
def test_checkpoint_wrapper_builds_and_matches_preprocess(preset, tmp_path):
    media_proc_cfg = {"k3": K3_CFG, "k25": K25_CFG,
                      "k3-before": cfg("kimi_k3", transparent_bg_fill_stage="before_resize")}[preset]
    ours = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    wrapper = checkpoint_processor_class()(image_processor=ours, tokenizer=small_tokenizer())
    assert wrapper.image_processor is ours and wrapper.media_processor is ours
    images = [noise(640, 480, "RGB", 1), alpha_pattern_rgba(900, 1300, 2), noise(3000, 200, "RGB", 3)]
    text = "describe <|kimi_image_placeholder|> and <|kimi_image_placeholder|> and <|kimi_image_placeholder|>"
    out = wrapper(medias=[{"type": "image", "image": im} for im in images], text=text, return_tensors="np")
    want = kimi_k3_rs.preprocess(images, media_proc_cfg)
    assert_bit_equal(out["pixel_values"], want["pixel_values"])
    assert_bit_equal(out["grid_thws"], want["grid_thws"], "grid_thws")
    assert out["input_ids"].shape[0] == 1 and {"input_ids", "attention_mask"} <= set(out.keys())
    # the K3 prompt carries the original sizes
    _, prompts = wrapper.preprocess_medias([{"type": "image", "image": im} for im in images])
    assert prompts[1] == "<|media_begin|>image 900x1300<|media_content|><|media_pad|><|media_end|>"
    with pytest.raises(ValueError, match=exact("unsupported media type: video")):
        wrapper.preprocess_medias([{"type": "video", "video": "x"}])
    # ProcessorMixin's repr and save_pretrained deep-copy and serialise their parts
    assert f"{ours!r}" in repr(wrapper)
    wrapper.save_pretrained(tmp_path)
    saved = "".join(p.read_text() for p in tmp_path.iterdir() if p.name.endswith("processor_config.json"))
    assert '"image_processor_type"' in saved and '"media_proc_cfg"' in saved
    twin = copy.deepcopy(ours)
    assert type(twin) is type(ours) and twin.media_proc_cfg == ours.media_proc_cfg and twin.config is ours.config
    assert_bit_equal(twin.preprocess(images, return_tensors="np")["pixel_values"], want["pixel_values"])


# ---------------------------------------------------------------------------
# return_tensors: None gives torch when torch imports (a stand-in here)
# ---------------------------------------------------------------------------


@pytest.fixture
def fake_torch(monkeypatch):
    """A stand-in ``torch`` whose ``from_numpy`` wraps the array (tensors record their source)."""

    class Tensor:
        def __init__(self, array):
            self.array = array

        def view(self, dtype):
            return Tensor(self.array) if dtype == "bfloat16" else self

    torch = types.ModuleType("torch")
    torch.from_numpy = Tensor
    torch.bfloat16 = "bfloat16"
    torch.Tensor = Tensor
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(hf_outputs, "_TORCH", hf_outputs.UNSET)
    return torch


def test_return_tensors_none_gives_torch_when_it_imports(fake_torch):
    processor = kimi_k3_rs.KimiK3VisionProcessor(K25_CFG)
    images = [noise(50, 40)]
    want = kimi_k3_rs.preprocess(images, K25_CFG)
    for kwargs in ({}, {"return_tensors": None}, {"return_tensors": "pt"}):
        out = processor.preprocess(images, **kwargs)
        assert isinstance(out["pixel_values"], fake_torch.Tensor) and isinstance(out["grid_thws"], fake_torch.Tensor)
        assert_bit_equal(out["pixel_values"].array, want["pixel_values"])
    out = processor.preprocess(images, return_tensors="np")
    assert isinstance(out["pixel_values"], np.ndarray)


def test_return_tensors_none_gives_numpy_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(hf_outputs, "_TORCH", hf_outputs.UNSET)
    out = kimi_k3_rs.KimiK3VisionProcessor(K25_CFG).preprocess([noise(50, 40)])
    assert isinstance(out["pixel_values"], np.ndarray) and out["grid_thws"].dtype == np.int64


# ---------------------------------------------------------------------------
# split_video_chunks (K2.5): mecord, or an error naming split_video_frames
# ---------------------------------------------------------------------------


def test_split_video_chunks_without_mecord(monkeypatch):
    monkeypatch.setitem(sys.modules, "mecord", None)
    with pytest.raises(ImportError, match="kimi_k3_rs.split_video_frames"):
        kimi_k3_rs.KimiK3VisionProcessor(K25_CFG).split_video_chunks(b"not a video")


def test_split_video_chunks_with_a_mecord_stand_in(monkeypatch):
    calls = []

    class VideoReader:
        def __init__(self, src, **kwargs):
            calls.append((src, kwargs))
            self.num_frames, self.avg_fps, self.original_width, self.original_height = 75, 30.0, 64, 48

        def __getitem__(self, indices):
            return [np.full((48, 64, 3), i, np.uint8) for i in indices]

    mecord = types.ModuleType("mecord")
    mecord.VideoReader = VideoReader
    monkeypatch.setitem(sys.modules, "mecord", mecord)
    chunks = kimi_k3_rs.KimiK3VisionProcessor(K25_CFG).split_video_chunks(b"video bytes")
    # video-spec section 3: 75 frames at 30 fps -> [0, 18, 37, 56], [74]
    assert [[int(np.asarray(f)[0, 0, 0]) for f in c["video_chunk"]] for c in chunks] == [[0, 18, 37, 56], [74]]
    assert [c["prompt"] for c in chunks] == [
        "00:00:00.000<|media_begin|>video<|media_content|><|media_pad|><|media_end|>",
        "00:00:02.466<|media_begin|>video<|media_content|><|media_pad|><|media_end|>",
    ]
    assert all(c["type"] == "video_chunk" and c["video_chunk"][0].mode == "RGB" for c in chunks)
    assert calls[0] == (b"video bytes", {"auto_init": True, "num_threads": 1})
    assert calls[1] == (b"video bytes", {"num_threads": 4, "frame_time_info": None, "key_indices": None})


def test_timestamps():
    assert kimi_k3_rs.video.timestamp_as_str(36 / 30, "hh:mm:ss.fff") == "00:00:01.199"  # the float64 truncation (video-spec 4)
    assert kimi_k3_rs.video.timestamp_as_str(3725.5, "mm:ss.fff") == "02:05.500"
    assert kimi_k3_rs.video.timestamp_as_str(3725.5, "mm:ss") == "02:05"
    with pytest.raises(ValueError, match=exact("Invalid timestamp mode: hh")):
        kimi_k3_rs.video.timestamp_as_str(1.0, "hh")


# ---------------------------------------------------------------------------
# from_pretrained of a Hub repo id, offline, from a pre-filled cache
# ---------------------------------------------------------------------------

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fill_hub_cache(cache, repo_id, preprocessor_config, commit=COMMIT):
    """The huggingface_hub cache layout: models--owner--name/{refs/main, snapshots/<commit>/...}."""
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "preprocessor_config.json").write_text(json.dumps(preprocessor_config))


HUB_SCRIPT = r"""
import sys
import kimi_k3_rs
p = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained("moonshotai/Kimi-K3")
q = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained("moonshotai/Kimi-K3", revision=sys.argv[1])
print(p.media_proc_cfg["in_patch_limit"], q.media_proc_cfg["in_patch_limit"])
try:
    kimi_k3_rs.KimiK3VisionProcessor.from_pretrained("moonshotai/not-cached")
except Exception as exc:
    print("missing:", type(exc).__name__, isinstance(exc, (OSError, ValueError)))
"""


def test_from_pretrained_repo_id_offline(tmp_path):
    pytest.importorskip("huggingface_hub")
    cache = tmp_path / "hub"
    fill_hub_cache(cache, "moonshotai/Kimi-K3", {"media_proc_cfg": K3_CFG, "auto_map": {}})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-c", HUB_SCRIPT, COMMIT], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "65536 65536"
    assert lines[1].startswith("missing:") and lines[1].endswith("True")
    # in process: cache_dir, local_files_only, revision, subfolder, options
    fill_hub_cache(cache, "me/ckpt", {"media_proc_cfg": cfg("kimi_k25", in_patch_limit=999)})
    processor = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(
        "me/ckpt", revision=COMMIT, cache_dir=cache, local_files_only=True, dtype="float16")
    assert processor.media_proc_cfg["in_patch_limit"] == 999 and processor.options.dtype == "float16"


def test_from_pretrained_local_paths_are_not_repo_ids(tmp_path):
    with pytest.raises(FileNotFoundError):
        kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError):
        kimi_k3_rs.KimiK3VisionProcessor.from_pretrained("./nowhere/at/all")
    (tmp_path / "ckpt" / "sub").mkdir(parents=True)
    (tmp_path / "ckpt" / "sub" / "preprocessor_config.json").write_text(json.dumps({"media_proc_cfg": K25_CFG}))
    assert kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(tmp_path / "ckpt", subfolder="sub").model_type == "kimi_k25"
    assert not hub._is_repo_id("/abs/path") and not hub._is_repo_id("a/b/c") and hub._is_repo_id("owner/name")


def test_from_pretrained_repo_id_without_huggingface_hub(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(FileNotFoundError, match="huggingface_hub"):
        kimi_k3_rs.KimiK3VisionProcessor.from_pretrained("moonshotai/Kimi-K3")


# ---------------------------------------------------------------------------
# examples/vllm_processor.py (a vLLM-style wrapper around ours)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("transformers", ["as installed", "blocked"])
def test_vllm_example_runs(tmp_path, transformers):
    env = dict(os.environ)
    if transformers == "blocked":
        shim = tmp_path / "shim" / "transformers"
        shim.mkdir(parents=True)
        (shim / "__init__.py").write_text('raise ImportError("transformers blocked by the test")\n')
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim.parent), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(REPO_DIR / "examples" / "vllm_processor.py")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("example: OK"), proc.stdout
    is_base = transformers == "as installed" and HAS_TRANSFORMERS
    assert f"a BaseImageProcessor: {is_base}" in proc.stdout


# --- sglang's exact fast CPU path through our get_resize_config / resize_image ----------


def sglang_fast_path(proc, images, media_proc_cfg):
    """sglang ``cpu_image_processing.materialize_exact_navit_image_features``, transcribed:
    the processor's ``get_resize_config`` and ``resize_image``, then a uint8 -> float32 table
    (``v / 255.0`` as float32, ``-=`` the float64 mean, ``*=`` the float64 ``1 / std``) and
    the checkpoint's patch layout. K2.5 items are converted to RGB first; K3 items are
    passed in their own mode."""
    ps = media_proc_cfg["patch_size"]
    table = (np.arange(256) / 255.0).astype(np.float32)[None, :].repeat(3, axis=0)
    table -= np.array(media_proc_cfg["image_mean"], dtype=np.float64)[:, None]
    table *= (1.0 / np.array(media_proc_cfg["image_std"], dtype=np.float64))[:, None]
    patches = []
    for image in images:
        if "transparent_bg_config" not in media_proc_cfg:
            with warnings.catch_warnings():  # Pillow's warning for a bytes tRNS (sglang runs without -W error)
                warnings.simplefilter("ignore", UserWarning)
                image = image.convert("RGB")
        rc = proc.get_resize_config({"type": "image", "image": image})
        arr = proc.resize_image(image, rc["new_width"], rc["new_height"], rc["pad_width"], rc["pad_height"])
        if arr.ndim != 3 or arr.shape[2] != 3:
            raise ValueError("uint8 image normalization requires three channels")
        values = np.stack([table[c][arr[:, :, c]] for c in range(3)], axis=-1)
        h, w = values.shape[0] // ps, values.shape[1] // ps
        patches.append(values.reshape(h, ps, w, ps, 3).transpose(0, 2, 4, 1, 3).reshape(-1, 3, ps, ps))
    return np.concatenate(patches)


@pytest.mark.parametrize("name", ["k3", "k25"])
def test_sglang_fast_path_gives_the_checkpoints_bytes(name):
    media_proc_cfg = K3_CFG if name == "k3" else K25_CFG
    proc = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    images = [noise(500, 300, "RGB", 1), alpha_pattern_rgba(130, 90), mode_image("L+trns", 57, 31, 2),
              mode_image("P+bytes_trns", 200, 120, 3), noise(1500, 2000, "RGB", 4)]
    fast = sglang_fast_path(proc, images, media_proc_cfg)
    ours = kimi_k3_rs.preprocess(images, media_proc_cfg)["pixel_values"]
    assert_bit_equal(fast, ours, "pixel_values")


def test_sglang_fast_path_fails_on_four_channels_as_with_the_checkpoint():
    """A K3 config compositing before the resize: resize_image returns the RGBA image's 4
    channels, as the checkpoint's does, and sglang's fast path cannot normalise them."""
    media_proc_cfg = {**K3_CFG, "transparent_bg_fill_stage": "before_resize"}
    proc = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    image = alpha_pattern_rgba(90, 130)
    rc = proc.get_resize_config({"type": "image", "image": image})
    assert proc.resize_image(image, rc["new_width"], rc["new_height"], rc["pad_width"], rc["pad_height"]).shape[2] == 4
    with pytest.raises(ValueError, match="three channels"):
        sglang_fast_path(proc, [image], media_proc_cfg)
