"""``kimi_k3_rs.ray`` on local Ray clusters: bit for bit with ``preprocess``, loopback only.

One 2-CPU cluster serves the session (:func:`ray_cluster`); the two-node test and the
command line run their own clusters in child processes. Every Ray server listens on
127.0.0.1 only: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (read when Ray is imported)
keeps Ray from replacing ``127.0.0.1`` by the machine's reachable address. Every
cluster gets a new folder of its own (:func:`ray_folder`): Ray's temp folder, ``HOME``
(Ray writes an auth token there) and ``RAY_TMPDIR`` (where ``ray.cluster_utils.Cluster``
writes ``ray/ray_current_cluster``), so that nothing depends on what an earlier run
left on the machine or is left for a later one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray is imported
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
pytest.importorskip("pytest_timeout")
psutil = pytest.importorskip("psutil")
pa = pytest.importorskip("pyarrow")
ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import kimi_k3_rs  # noqa: E402
from helpers import DATA_DIR, K3_CFG, K25_CFG, PHOTOS, alpha_pattern_rgba, noise  # noqa: E402
from kimi_k3_rs.arrow import arrow_schema, pixel_values_from_arrow  # noqa: E402
from kimi_k3_rs.ray import KimiK3Preprocessor, count_tokens_dataset, preprocess_dataset  # noqa: E402

#: Ray's own deprecation warnings (raised inside ray.data), not ours: the suite runs with
#: filterwarnings = error.
pytestmark = [pytest.mark.filterwarnings(r"ignore::DeprecationWarning:ray(\..*)?"), pytest.mark.slow]

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
TESTS_DIR = Path(__file__).resolve().parent


#: Room that Ray's socket paths take below its temp folder
#: (``session_<date>_<time>_<pid>/sockets/plasma_store``, about 70 bytes): AF_UNIX
#: paths are limited to 107 bytes.
SOCKET_ROOM = 72


@contextlib.contextmanager
def ray_folder():
    """A new, empty folder for one Ray cluster, removed afterwards: ``ray`` (Ray's temp
    folder, and where ``Cluster`` writes ``ray_current_cluster``: ``$RAY_TMPDIR/ray``)
    and ``home`` (``HOME``). It is made under ``$TMPDIR`` (``tempfile.gettempdir()``),
    or under ``/tmp`` where that path is too long for Ray's sockets."""
    base = tempfile.gettempdir()
    if len(os.path.join(base, "krXXXXXXXX", "ray")) + SOCKET_ROOM > 107:
        base = "/tmp"
    folder = tempfile.mkdtemp(prefix="kr", dir=base)
    try:
        os.makedirs(os.path.join(folder, "ray"))
        os.makedirs(os.path.join(folder, "home"))
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _ray_env(folder: str) -> dict[str, str]:
    """The environment of a child that runs a cluster of its own in ``folder``
    (:func:`ray_folder`)."""
    # Nothing the session cluster's ray.init exported (RAY_AUTH_MODE=token would make a
    # new cluster look for a token it has not made, RAY_ADDRESS would join the old one).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k not in ("PYTHONBREAKPOINT", "PYTHONWARNINGS")}
    env.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=folder,
               HOME=os.path.join(folder, "home"), PYTHONPATH=os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")]))
    return env


@pytest.fixture(scope="session")
def ray_cluster():
    """A local 2-CPU cluster on 127.0.0.1, in a folder of its own (:func:`ray_folder`);
    shut down at the end."""
    saved = dict(os.environ)  # ray.init exports RAY_AUTH_MODE, PYTHONBREAKPOINT: all restored
    with ray_folder() as folder:
        os.environ.update(HOME=os.path.join(folder, "home"), RAY_TMPDIR=folder)
        os.environ.pop("RAY_ADDRESS", None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                     _temp_dir=os.path.join(folder, "ray"), log_to_driver=False)
            ray.data.DataContext.get_current().execution_options.preserve_order = True
        try:
            yield ray
        finally:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                ray.shutdown()
            os.environ.clear()
            os.environ.update(saved)


def images_folder(folder: Path, count: int = 20) -> list[Path]:
    """``count`` image files: the shipped photos, then noise of various sizes and modes."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        if i < len(PHOTOS):
            path = folder / f"{i:02d}-{PHOTOS[i]}"
            shutil.copy(DATA_DIR / PHOTOS[i], path)
        elif i % 3 == 0:
            path = folder / f"{i:02d}.png"
            alpha_pattern_rgba(90 + 17 * i, 60 + 11 * i, seed=i).save(path)
        else:
            path = folder / f"{i:02d}.jpg"
            noise(100 + 23 * i, 300 - 9 * i, "RGB", i).save(path, quality=90)
        paths.append(path)
    return paths


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the GCS port of a second cluster: the default, 6379,
    may be the session cluster's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening_addresses(pids: set[int]) -> set[str]:
    return {c.laddr.ip for c in psutil.net_connections(kind="inet") if c.pid in pids and c.status == psutil.CONN_LISTEN}


def ray_pids() -> set[int]:
    me = psutil.Process()
    return {me.pid} | {p.pid for p in me.children(recursive=True)}


@pytest.mark.timeout(180)
def test_preprocess_dataset_bit_exact(ray_cluster, tmp_path):
    paths = images_folder(tmp_path / "imgs")
    ds = ray.data.from_items([{"bytes": p.read_bytes(), "path": str(p)} for p in paths])
    out = preprocess_dataset(ds, K3_CFG, batch_size=6, dtype="bfloat16")
    table = pa.concat_tables(list(out.iter_batches(batch_size=None, batch_format="pyarrow")))
    assert table.column_names == ["path", "pixel_values", "grid_thw", "num_tokens", "error"]
    assert table["path"].to_pylist() == [str(p) for p in paths]
    want = kimi_k3_rs.preprocess([str(p) for p in paths], K3_CFG, dtype="bfloat16")
    got = np.concatenate(pixel_values_from_arrow(table))
    assert got.view(np.uint16).tobytes() == want["pixel_values"].view(np.uint16).tobytes()
    assert table["grid_thw"].to_pylist() == want["grid_thws"].tolist()
    assert table["error"].null_count == len(paths)


@pytest.mark.timeout(180)
def test_folder_to_parquet_with_defaults(ray_cluster, tmp_path):
    """read_binary_files -> preprocess_dataset (default actors: the read task is not
    starved on 2 CPUs) -> write_parquet; a bad file gets its error row; plain pyarrow reads it."""
    import pyarrow.dataset

    paths = images_folder(tmp_path / "imgs", 8)
    (tmp_path / "imgs" / "99-broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png")
    ds = ray.data.read_binary_files(str(tmp_path / "imgs"), include_paths=True)
    preprocess_dataset(ds, K25_CFG, on_error="null").write_parquet(str(tmp_path / "out"))
    table = pyarrow.dataset.dataset(str(tmp_path / "out"), format="parquet").to_table()
    table = table.take(pa.compute.sort_indices(table, [("path", "ascending")]))
    assert table.num_rows == 9
    assert table.column_names == ["path", "pixel_values", "grid_thw", "num_tokens", "error"]
    assert table.schema.field("pixel_values").type == arrow_schema("float32").field("pixel_values").type
    errors = table["error"].to_pylist()
    assert errors[:8] == [None] * 8 and "cannot read or decode" in errors[8]
    pixels = pixel_values_from_arrow(table)
    assert pixels[8] is None
    want = kimi_k3_rs.preprocess([str(p) for p in paths], K25_CFG)
    assert np.concatenate(pixels[:8]).tobytes() == want["pixel_values"].tobytes()
    assert table["num_tokens"].to_pylist()[:8] == kimi_k3_rs.prepare_kimi_k3_encoder_inputs(
        [str(p) for p in paths], K25_CFG).num_tokens


@pytest.mark.timeout(120)
def test_count_tokens_dataset(ray_cluster):
    sizes = [[1920, 1080], [4000, 3000], [28, 28], [8366, 10]]
    ds = ray.data.from_items([{"w": w, "h": h, "id": i} for i, (w, h) in enumerate(sizes)])
    rows = count_tokens_dataset(ds, K25_CFG, width_column="w", height_column="h").take_all()
    assert [r["num_tokens"] for r in rows] == kimi_k3_rs.count_image_tokens(sizes, K25_CFG).tolist()
    assert [r["id"] for r in rows] == [0, 1, 2, 3]


@pytest.mark.timeout(60)
def test_every_ray_server_listens_on_loopback(ray_cluster):
    addresses = listening_addresses(ray_pids())
    assert addresses, "no listening socket found for the Ray processes"
    assert addresses <= LOOPBACK, addresses


def test_preprocessor_checks_its_arguments_up_front():
    with pytest.raises(kimi_k3_rs.ConfigError):
        KimiK3Preprocessor({**K3_CFG, "patch_size": 0})
    with pytest.raises(ValueError, match="on_error"):
        KimiK3Preprocessor(K3_CFG, on_error="skip")
    with pytest.raises(TypeError):
        KimiK3Preprocessor(K3_CFG, colour="red")
    batch = pa.table({"img": [b"x"]})
    with pytest.raises(ValueError, match="column 'bytes': is not in the batch"):
        KimiK3Preprocessor(K3_CFG)(batch)
    out = KimiK3Preprocessor(K3_CFG, column="img", on_error="null")(batch)
    assert out.column_names == ["pixel_values", "grid_thw", "num_tokens", "error"]  # bytes dropped
    assert out["error"][0].as_py().startswith("cannot read or decode")


TWO_NODES = textwrap.dedent(
    """
    import json, os, sys, time
    import psutil, ray
    from ray.cluster_utils import Cluster
    import kimi_k3_rs
    from kimi_k3_rs.arrow import pixel_values_from_arrow
    from kimi_k3_rs.ray import KimiK3Preprocessor, preprocess_dataset
    import pyarrow as pa

    temp, port, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    ready = os.path.join(os.path.dirname(temp), "ready")
    os.makedirs(ready, exist_ok=True)

    class Tagged(KimiK3Preprocessor):
        # Tags rows with their node; the first batch waits until both actors exist, so a
        # loaded machine cannot let one actor take every batch before the other starts.

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            open(os.path.join(ready, ray.get_runtime_context().get_actor_id()), "w").close()

        def __call__(self, batch):
            deadline = time.monotonic() + 120
            while len(os.listdir(ready)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            out = super().__call__(batch)
            node = ray.get_runtime_context().get_node_id()
            return out.append_column("node", pa.array([node] * out.num_rows, pa.string()))

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": "127.0.0.1", "gcs_server_port": port, "include_dashboard": False, "temp_dir": temp})
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    ds = ray.data.from_items([{"bytes": open(p, "rb").read(), "path": p} for p in paths])
    cfg = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
    out = ds.map_batches(Tagged, fn_constructor_args=(cfg,), batch_size=1, batch_format="pyarrow",
                         compute=ray.data.ActorPoolStrategy(size=2), num_cpus=0.75,
                         scheduling_strategy="SPREAD")
    table = pa.concat_tables(list(out.iter_batches(batch_size=None, batch_format="pyarrow")))
    want = kimi_k3_rs.preprocess(paths, cfg)["pixel_values"]
    import numpy as np
    same = np.concatenate(pixel_values_from_arrow(table)).tobytes() == want.tobytes()
    me = psutil.Process()
    pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
    listening = sorted({c.laddr.ip for c in psutil.net_connections(kind="inet")
                        if c.pid in pids and c.status == psutil.CONN_LISTEN})
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    print(json.dumps({"same": same, "paths": table["path"].to_pylist(), "row_nodes": table["node"].to_pylist(),
                      "nodes": nodes, "listening": listening}))
    ray.shutdown()
    cluster.shutdown()
    """
)


@pytest.mark.timeout(240)
def test_two_nodes_spread(tmp_path):
    """Two 1-CPU nodes on 127.0.0.1 (ray.cluster_utils.Cluster, in a child process): with
    SPREAD, rows come from both nodes, bit for bit with preprocess; loopback only."""
    paths = [str(p) for p in images_folder(tmp_path / "imgs", 12)]
    with ray_folder() as folder:
        proc = subprocess.run([sys.executable, "-c", TWO_NODES, os.path.join(folder, "ray"), str(free_port()), *paths],
                              capture_output=True, text=True, timeout=220, env=_ray_env(folder))
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["same"]
    assert result["paths"] == paths
    assert len(result["nodes"]) == 2
    assert set(result["row_nodes"]) == set(result["nodes"]), result["row_nodes"]
    assert result["listening"] and set(result["listening"]) <= LOOPBACK, result["listening"]


@pytest.mark.timeout(240)
def test_cli_ray_matches_local(tmp_path):
    """``kimi-k3-rs preprocess FOLDER --ray`` starts a local cluster and gives the same
    lines and Parquet rows as the local run."""
    folder = tmp_path / "imgs"
    paths = images_folder(folder, 6)
    common = [sys.executable, "-m", "kimi_k3_rs", "preprocess", str(folder), "--format", "parquet", "--batch-size", "4"]
    with ray_folder() as ray_temp:
        local = subprocess.run([*common, "--output", str(tmp_path / "local")], capture_output=True, text=True,
                               timeout=200, env=_ray_env(ray_temp))
        remote = subprocess.run([*common, "--output", str(tmp_path / "ray"), "--ray"], capture_output=True, text=True,
                                timeout=200, env=_ray_env(ray_temp))
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr[-4000:]

    def without_ms(text):
        return [line.rsplit("\t", 1)[0] for line in text.splitlines() if line.strip()]

    assert without_ms(remote.stdout) == without_ms(local.stdout)
    assert [line.split("\t")[0] for line in local.stdout.splitlines()] == [str(p) for p in paths]
    import pyarrow.dataset

    a = pyarrow.dataset.dataset(str(tmp_path / "local"), format="parquet").to_table()
    b = pyarrow.dataset.dataset(str(tmp_path / "ray"), format="parquet").to_table()
    assert a.equals(b)
