"""--engine ray against a real local Ray cluster (started once for this
module on 127.0.0.1 with 2 CPUs, stopped after) and, where moto is
installed, a real S3-compatible server on 127.0.0.1.

What holds: a Ray build is byte-identical to a local build (every file of
the folder); progress reaches the same totals; --resume finishes a build the
other engine started, either way round; a worker killed mid-build is
retried and the output is unchanged; a unit whose worker dies every time
fails the build with one line, and the resumed build is byte-identical; the
CLI connects to a running cluster with --ray-address."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

try:
    import ray
except ImportError:  # the tests that need it skip (pip install 'packer[ray]')
    ray = None

from packer import BuildConfig, build
from packer.errors import InputError, PackerError

from tests._services import folder_files
from tests.conftest import SAMPLE, write_jsonl

SETTINGS = dict(seq_len=256, unit_bytes=300_000)
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # Ray then takes 127.0.0.1 as this node's address


@pytest.fixture(scope="module")
def s3_env():
    """A moto S3 server, started before Ray so that Ray's workers inherit its endpoint; None without moto."""
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError:
        yield None
        return
    from tests._services import moto_s3

    with moto_s3() as env:
        yield env


@pytest.fixture(scope="module")
def cluster(s3_env):
    """One local Ray for the module; yields its address (what --ray-address takes)."""
    if ray is None:
        pytest.skip("ray is not installed (pip install 'packer[ray]')")
    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in LOOPBACK_ONLY.items():
            mp.setenv(k, v)
        ctx = ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                       _node_ip_address="127.0.0.1")
        try:
            yield ctx.address_info["address"]
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def local_build(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("local") / "out")
    build(BuildConfig.of(inputs=(SAMPLE,), out=out, workers=2, **SETTINGS))
    return out


def _drop_units(out: str, units: list[int]) -> None:
    """Make ``out`` look like a build killed before ``units`` finished."""
    os.unlink(os.path.join(out, "manifest.json"))
    for u in units:
        os.unlink(os.path.join(out, "units", f"{u:06d}.json"))


def test_a_ray_build_is_byte_identical_to_a_local_build(cluster, local_build, tmp_path):
    out = str(tmp_path / "out")
    seen = []
    r = build(BuildConfig.of(inputs=(SAMPLE,), out=out, workers=2, engine="ray", **SETTINGS),
              progress=lambda *a: seen.append(a))
    assert folder_files(out) == folder_files(local_build)
    assert r.units_run == len(r.manifest["shards"]) >= 10
    assert any(n.startswith("engine ray:") for n in r.notes)
    # Progress: a report at the start, one per chunk tokenized (a task streams its input bytes) and one per
    # unit; never backwards, ending at the manifest's totals.
    done, docs, tokens, units_done, units, total = zip(*seen)
    assert sorted(set(units_done)) == list(range(units[0] + 1)) and units[0] == r.units_run
    assert list(units_done) == sorted(units_done) and len(seen) > units[0] + 1
    assert list(done) == sorted(done) and done[-1] == total[0]
    t = r.manifest["totals"]
    assert (docs[-1], tokens[-1]) == (t["documents"], t["tokens"])


def test_a_ray_build_with_gpt2_is_byte_identical(cluster, gpt2_path, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    cfg = dict(inputs=(os.path.join(SAMPLE, "corpus.jsonl"),), seq_len=512, tokenizer=gpt2_path, unit_bytes=400_000, workers=2)
    build(BuildConfig.of(out=a, **cfg))
    r = build(BuildConfig.of(out=b, engine="ray", **cfg))
    assert r.manifest["tokenizer"]["name"] == gpt2_path
    assert folder_files(a) == folder_files(b)


def test_resume_finishes_what_the_other_engine_started(cluster, local_build, tmp_path):
    want = folder_files(local_build)
    n = len([k for k in want if k.startswith("units/")])
    for first, then in (("local", "ray"), ("ray", "local")):
        out = str(tmp_path / f"{first}-{then}")
        cfg = BuildConfig.of(inputs=(SAMPLE,), out=out, workers=2, engine=first, **SETTINGS)
        build(cfg)
        _drop_units(out, [0, 4, n - 1])
        os.unlink(os.path.join(out, "shards", "000006.arrow"))  # record kept, shard gone: not finished
        r = build(cfg.but(engine=then, resume=True))
        assert (r.units_run, r.units_skipped) == (4, n - 4)
        assert folder_files(out) == want


def _corpus(tmp_path, units: int = 8) -> str:
    """A jsonl of about ``units`` x 1 MB, each unit a few tenths of a second of work."""
    texts = [f"{i} " + ("lorem ipsum dolor sit amet " * (200 + i % 300)) for i in range(8 * units * 100)]
    return write_jsonl(tmp_path / "big.jsonl", texts)


def _kill_one_running_unit(stop: threading.Event, killed: list) -> None:
    """SIGKILL the first Ray worker seen running a unit (process title ray::packer_unit)."""
    me = os.getpid()
    while not stop.is_set() and not killed:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    title = f.read()
            except OSError:
                continue
            if title.startswith(b"ray::packer_unit"):
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
                return
        time.sleep(0.005)


@pytest.mark.slow  # about 6 s each: Ray starts fresh workers after each death; CI runs them
def test_a_worker_killed_mid_build_is_retried_and_the_output_is_unchanged(cluster, tmp_path):
    path = _corpus(tmp_path)
    cfg = dict(inputs=(path,), seq_len=1024, unit_bytes=1 << 20, workers=2)
    build(BuildConfig.of(out=str(tmp_path / "local"), **cfg))
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_one_running_unit, args=(stop, killed))
    killer.start()
    try:
        r = build(BuildConfig.of(out=str(tmp_path / "ray"), engine="ray", **cfg))
    finally:
        stop.set()
        killer.join()
    assert killed, "no worker was caught running a unit"
    assert r.units_run == len(r.manifest["shards"]) >= 6
    assert folder_files(str(tmp_path / "ray")) == folder_files(str(tmp_path / "local"))


@pytest.mark.slow  # about 6 s each: Ray starts fresh workers after each death; CI runs them
def test_a_unit_whose_worker_always_dies_fails_in_one_line_then_resumes(cluster, local_build, tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    cfg = BuildConfig.of(inputs=(SAMPLE,), out=out, workers=2, engine="ray", **SETTINGS)
    monkeypatch.setenv("PACKER_FAULT", "kill-worker")  # SIGKILL of the worker, after the unit's record (faults.py)
    monkeypatch.setenv("PACKER_FAULT_UNIT", "3")
    with pytest.raises(PackerError) as e:
        build(cfg)
    msg = str(e.value)
    assert "\n" not in msg and "a Ray worker died" in msg and "unit 3" in msg and "resume=True" in msg
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    monkeypatch.delenv("PACKER_FAULT")
    r = build(cfg.but(resume=True, engine="local"))
    assert r.units_skipped >= 1
    assert folder_files(out) == folder_files(local_build)


def test_a_bad_record_under_strict_is_the_same_one_line_on_ray(cluster, tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", ["good"] * 50)
    with open(path, "a") as f:
        f.write("{broken\n")
    for engine in ("local", "ray"):
        with pytest.raises(InputError, match=rf"^{path}:51: malformed_json"):
            build(BuildConfig.of(inputs=(path,), out=str(tmp_path / engine), strict=True, engine=engine, workers=2))


def test_s3_in_and_out_on_ray_is_byte_identical(cluster, s3_env, local_build):
    if s3_env is None:
        pytest.skip("moto[server] not installed")
    from tests._services import make_bucket, objects, upload_tree

    make_bucket("ray-corpus")
    upload_tree(SAMPLE, "ray-corpus", "in")
    make_bucket("ray-out")
    r = build(BuildConfig.of(inputs=("s3://ray-corpus/in",), out="s3://ray-out/build", workers=2, engine="ray", **SETTINGS))
    got = objects("ray-out", "build")
    want = folder_files(local_build)
    assert sorted(got) == sorted(want)
    assert all(got[k] == want[k] for k in want if k.startswith("shards/"))
    assert r.manifest["shards"][0]["sources"][0]["path"].startswith("s3://ray-corpus/in/")


def test_the_cli_runs_on_a_running_cluster(cluster, local_build, tmp_path):
    out = str(tmp_path / "out")
    env = {**os.environ, **LOOPBACK_ONLY}
    p = subprocess.run([sys.executable, "-m", "packer.cli", "build", SAMPLE, out, "--seq-len", "256", "--unit-mb",
                        str(SETTINGS["unit_bytes"] / (1 << 20)), "--workers", "2", "--engine", "ray", "--ray-address", cluster],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "built " in p.stderr and "engine ray:" in p.stderr
    assert folder_files(out) == folder_files(local_build)


def test_relative_paths_mean_what_they_mean_to_the_driver(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("in")
    write_jsonl(tmp_path / "in" / "c.jsonl", [f"text {i} " * (i % 50 + 1) for i in range(3000)])
    cfg = dict(inputs=("in",), seq_len=128, unit_bytes=50_000, workers=2)
    build(BuildConfig.of(out="a", **cfg))
    r = build(BuildConfig.of(out="b", engine="ray", **cfg))
    assert r.manifest["shards"][0]["sources"][0]["path"] == os.path.join("in", "c.jsonl")
    assert folder_files("a") == folder_files("b")


def test_a_path_missing_on_a_worker_node_is_named_not_counted(cluster, tmp_path):
    """A Ray node without the shared filesystem (here: OUT gone after planning) fails in one line."""
    import importlib

    from packer.pipeline.engines.ray import packer_unit
    from packer.formats import discover, plan_slices
    from packer.tokenize import resolve_tokenizer

    B = importlib.import_module("packer.pipeline")
    path = write_jsonl(tmp_path / "c.jsonl", ["x"] * 10)
    unit = B.plan_units(plan_slices(discover([path]).files, 1 << 20), 1 << 20)[0]
    job = B.Job(str(tmp_path / "not-here"), B.OutputSettings(seq_len=16), B.RunSettings(), resolve_tokenizer(None), "uint16")
    with pytest.raises(PackerError, match=r"not-here is not on Ray node .*: with --engine ray, inputs and OUT must be"):
        next(packer_unit(job, unit, os.getcwd()))


def test_engine_ray_without_ray_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    with pytest.raises(PackerError, match=r"pip install 'packer\[ray\]'"):
        build(BuildConfig.of(inputs=(SAMPLE,), out=str(tmp_path / "o"), engine="ray"))


def test_holdout_on_ray_is_byte_identical_to_local(cluster, tmp_path):
    cfg = dict(inputs=(SAMPLE,), holdout=0.1, **SETTINGS)
    build(BuildConfig.of(out=str(tmp_path / "local"), workers=1, **cfg))
    build(BuildConfig.of(out=str(tmp_path / "ray"), workers=2, engine="ray", **cfg))
    a, b = folder_files(str(tmp_path / "local")), folder_files(str(tmp_path / "ray"))
    assert any(k.startswith("holdout/shards/") for k in a) and a == b


def _session(sid: int) -> set[int]:
    """The live processes of session ``sid`` (but its leader)."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != sid:
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.add(int(d))
    return out


def _descendants(root: int) -> set[int]:
    """The live processes below ``root`` (this test's own Ray, not another's on the machine)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parent[int(d)] = int(fields[1])
    out, todo = set(), [root]
    while todo:
        top = todo.pop()
        kids = [c for c, pp in parent.items() if pp == top]
        out.update(kids)
        todo.extend(kids)
    return out


def _titled(prefix: bytes, among=None) -> list[int]:
    found = []
    for pid in among if among is not None else [int(d) for d in os.listdir("/proc") if d.isdigit()]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(prefix):
                    found.append(pid)
        except OSError:
            pass
    return found


@pytest.mark.slow  # a unit's chunks take 2 s each, and a worker is stopped for 20 s
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the worker in /proc")
def test_a_stopped_worker_fails_the_build_in_one_line(cluster, tmp_path, monkeypatch):
    """SIGSTOP of a ray::packer_unit worker: no step from it for PACKER_RAY_STALL_S, one line naming its unit."""
    path = _corpus(tmp_path)
    monkeypatch.setenv("PACKER_FAULT", "slow")  # 2 s a chunk: the worker is caught mid-unit
    monkeypatch.setenv("PACKER_RAY_STALL_S", "20")  # (10x a chunk's time: a loaded machine does not trip it)
    stop, stopped = threading.Event(), []

    def stop_one():
        while not stop.is_set() and not stopped:
            for pid in _titled(b"ray::packer_unit", _descendants(os.getpid())):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
                if not stop.wait(240):  # a build that hangs on it (as it did) is let go: the test then fails
                    os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    stopper = threading.Thread(target=stop_one)
    stopper.start()
    try:
        with pytest.raises(PackerError) as e:
            build(BuildConfig.of(inputs=(path,), out=str(tmp_path / "out"), seq_len=1024, unit_bytes=1 << 20,
                                 workers=2, engine="ray"))
    finally:
        stop.set()
        stopper.join()
        for pid in stopped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    msg = str(e.value)
    assert stopped and "\n" not in msg and "made no progress for 20 s" in msg and "resume=True" in msg, msg


@pytest.mark.slow  # starts a Ray of its own
@pytest.mark.skipif(ray is None or not os.path.isdir("/proc"), reason="needs ray and /proc")
def test_no_process_of_its_own_ray_outlives_a_sigkilled_build(tmp_path):
    """packer's own local Ray: SIGKILL of packer alone, and every process of that Ray is gone (the watchdog)."""
    path = _corpus(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(LOOPBACK_ONLY, PACKER_FAULT="slow")
    p = subprocess.Popen([sys.executable, "-m", "packer.cli", "build", path, str(tmp_path / "out"), "--seq-len", "1024",
                          "--unit-mb", "1", "--workers", "2", "--engine", "ray", "-q"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.time() + 240
    while time.time() < deadline and not _titled(b"ray::packer_unit", _session(p.pid)):
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.2)
    time.sleep(1.0)  # every process Ray starts for the build is up
    ray_procs = _session(p.pid)
    assert _titled(b"ray::packer_unit", ray_procs), "no unit was running"
    p.kill()
    p.wait()
    _assert_ray_gone(p.pid, ray_procs)


def _assert_ray_gone(pid: int, ray_procs: set) -> None:
    """No process of the Ray that build ``pid`` started is left (20 s at most: the watchdog takes well under a
    second; without it Ray's agents were still running 37 s after, issue 41.7); any left are killed, then named."""
    deadline = time.time() + 20
    while time.time() < deadline and _session(pid) & ray_procs:
        time.sleep(0.2)
    left = _session(pid) & ray_procs
    for q in left:
        with contextlib.suppress(OSError):
            os.kill(q, signal.SIGKILL)
    assert not left, f"{len(left)} process(es) of packer's Ray outlived it: {_titled(b'', left)}"


@pytest.mark.slow  # starts a Ray of its own
@pytest.mark.skipif(ray is None or not os.path.isdir("/proc"), reason="needs ray and /proc")
def test_sigterm_on_ray_ends_as_on_every_engine_then_resumes(tmp_path):
    """SIGTERM to packer alone under --engine ray: exit 143, "packer: terminated" and the resume command (Ray's
    own handler, put in place by ray.init, gave exit 15 and a native crash dump); no process of its Ray left;
    --resume then gives the clean build, byte for byte (issue 53)."""
    path = _corpus(tmp_path, units=4)
    args = [path, "--seq-len", "1024", "--unit-mb", "1"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(LOOPBACK_ONLY, PACKER_FAULT="slow")
    out = str(tmp_path / "out")
    p = subprocess.Popen([sys.executable, "-m", "packer.cli", "build", *args[:1], out, *args[1:], "--workers", "2",
                          "--engine", "ray", "-q"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 240
    while time.time() < deadline and not _titled(b"ray::packer_unit", _session(p.pid)):
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.2)
    ray_procs = _session(p.pid)
    p.send_signal(signal.SIGTERM)  # to the main process only, as kill PID / docker stop send it
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err
    assert "Traceback" not in err and "packer: terminated (SIGTERM)" in err and "--resume" in err, err
    _assert_ray_gone(p.pid, ray_procs)
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    cfg = dict(seq_len=1024, unit_mb=1, workers=2)
    build(path, out, resume=True, **cfg)  # (the local engine: a Ray build resumes on either, as above)
    clean = str(tmp_path / "clean")
    build(path, clean, **cfg)
    assert folder_files(out) == folder_files(clean)


@pytest.mark.skipif(ray is None, reason="needs ray")
@pytest.mark.parametrize("exit_on_stop", [True, False])
def test_a_stop_leaves_its_own_ray_to_the_watchdog_only_where_the_process_ends(monkeypatch, exit_on_stop):
    """A KeyboardInterrupt (Ctrl-C, SIGTERM) in a build whose process then ends (the packer command:
    exit_on_stop) does not shut its Ray down here: ray.shutdown() stops each process gracefully and took 6.4 s
    at load 18 (issue 55.5); the watchdog kills that Ray when the process ends. Called from Python, the build
    still stops what it started before the KeyboardInterrupt reaches the caller."""
    from packer.pipeline.engines import ray as ray_engine_module
    from packer.pipeline.engines.ray import RayEngine

    done = []
    monkeypatch.setattr(ray_engine_module, "_connect", lambda *a: True)  # a Ray this build started
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2})
    monkeypatch.setattr(ray, "shutdown", lambda *a, **k: done.append("shutdown"))
    monkeypatch.setattr(ray_engine_module._Watchdog, "close", lambda self: done.append("watchdog closed"))

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(ray_engine_module, "_run_tasks", stopped)
    unit = type("U", (), {"index": 0})()
    with pytest.raises(KeyboardInterrupt):
        list(RayEngine(2, exit_on_stop=exit_on_stop).run([unit], job=None, progress=None))
    assert done == ([] if exit_on_stop else ["shutdown", "watchdog closed"])
