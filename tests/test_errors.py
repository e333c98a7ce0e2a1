"""Every bad input or environment fault is one line on stderr naming the parameter or file,
never a traceback; ``--debug`` (or PRIVPIX_DEBUG=1) shows the traceback. Exit codes: 2 for what the user or
the environment can fix, 1 for an internal error.

Most cases run in-process (the ``run`` fixture lets exceptions escape, so a traceback fails the test); a few
run the installed ``privpix`` in a subprocess to check stderr is exactly one line."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from conftest import needs_unshare, noise_folder
from privpix.cli import main
from privpix.data import ImageSet
from privpix.errors import DataError, ParameterError
from privpix.mechanisms import get_mechanism, parse_method_spec
from privpix.mechanisms.ldp import make_encoder
from privpix.publishing.release import release_to_dir

PRIVPIX = Path(sys.executable).with_name("privpix")
# A tiny audit, for commands whose error (if any) comes before the audit runs.
TINY_AUDIT = ("--images", 2, "--trials", 20, "--size", "4x4", "-q")


def _one_error_line(result, *needles: str, code: int = 2) -> str:
    """The single ``error:`` line of a failed in-process run, holding every needle."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _cli(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PRIVPIX), *map(str, args)], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


@pytest.fixture
def encoder_file(tmp_path) -> Path:
    """A fixed-scaling pixel encoder for 8x8 images (fitted on no data)."""
    return make_encoder("pixel").fit_unsupervised_shape(8, 8).save(tmp_path / "enc.npz")


@pytest.fixture
def report_dir(tmp_path) -> Path:
    """A finished report folder: 30 labelled 8x8 reports."""
    rng = np.random.default_rng(0)
    enc = make_encoder("pixel").fit_unsupervised_shape(8, 8).save(tmp_path / "enc.npz")
    images = ImageSet(rng.random((30, 8, 8, 1)).astype(np.float32), labels=np.arange(30) % 3, source="test images")
    out = tmp_path / "reports"
    release_to_dir(get_mechanism("ldp-pixel-report", epsilon=1.0, model=str(enc)), images, out, 0, labels=True)
    return out


@pytest.fixture
def image_folder(tmp_path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(folder / f"{i}.png")
    return folder


# ------------------------------------------------------------------------------------------ the top level


@pytest.fixture
def broken_audit(monkeypatch):
    """`privpix audit` with its first step replaced by ``raise``: an internal error on demand."""

    def install(exc: BaseException):
        def boom(*a, **k):
            raise exc

        monkeypatch.setattr("privpix.mechanisms.get_mechanism", boom)

    return install


def test_internal_error_is_one_line_with_exit_1(run, broken_audit):
    broken_audit(RuntimeError("boom\n  second line"))
    r = run("audit", "--method", "pixel-laplace", "--epsilon", 1)
    line = _one_error_line(r, "internal error: RuntimeError: boom second line", "--debug", code=1)
    assert "please report it" in line


def test_debug_flag_and_env_let_the_traceback_through(run, broken_audit):
    broken_audit(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        run("--debug", "audit", "--method", "pixel-laplace", "--epsilon", 1)
    with pytest.raises(RuntimeError, match="boom"):
        CliRunner().invoke(
            main, ["audit", "--method", "pixel-laplace", "--epsilon", "1"], env={"PRIVPIX_DEBUG": "1"},
            catch_exceptions=False,
        )  # fmt: skip


def test_memory_error_is_one_line(run, broken_audit):
    broken_audit(MemoryError("Unable to allocate 37.3 GiB"))
    r = run("audit", "--method", "pixel-laplace", "--epsilon", 1)
    _one_error_line(r, "out of memory: Unable to allocate 37.3 GiB", "--size")


def test_os_error_names_the_file(run, broken_audit):
    broken_audit(PermissionError(errno.EACCES, "Permission denied", "/some/file.npz"))
    r = run("audit", "--method", "pixel-laplace", "--epsilon", 1)
    _one_error_line(r, "/some/file.npz: Permission denied")


def test_a_full_disk_names_the_output(run, report_dir, tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")  # write() names no file

    monkeypatch.setattr("privpix.fileio.write_text_atomic", full)
    out = tmp_path / "result.json"
    r = run("ldp", "train", "--reports", report_dir, "--classifier", "nb", "--json", out, "-q")
    _one_error_line(r, f"--json {out}: No space left on device")


def test_usage_hint_names_the_whole_command(run, tmp_path):
    r = run("ldp", "perturb", "--encoder", tmp_path, "--epsilon", 1, "--dataset", "digits", "--output", tmp_path)
    _one_error_line(r, "`privpix ldp perturb --help`")


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["evaluate", "--dataset", "builtin-mnist", "--method", "pixel-laplace", "--size", "100000x100000"],
        [
            "audit",
            "--method",
            "pixel-laplace",
            "--epsilon",
            1,
            "--param",
            "sensitivity=bound",
            "--param",
            "sensitivity=data",
            *TINY_AUDIT,
        ],
        ["ldp", "train", "--reports", "x" * 300, "--classifier", "nb"],
    ],
)
def test_subprocess_stderr_is_exactly_one_line(args):
    p = _cli(*args)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.integration
def test_subprocess_debug_shows_the_traceback():
    args = ("evaluate", "--dataset", "builtin-mnist", "--method", "pixel-laplace", "--epsilon", "0")
    assert "Traceback" not in _cli(*args).stderr
    assert "Traceback" in _cli("--debug", *args).stderr
    assert "Traceback" in _cli(*args, env={"PRIVPIX_DEBUG": "1"}).stderr


@pytest.mark.integration
@pytest.mark.slow
@needs_unshare
def test_read_only_and_full_file_systems(tmp_path, encoder_file):
    """Real EROFS and ENOSPC: a read-only bind mount and a 4 KiB tmpfs in a private mount namespace (root
    ignores permission bits, so a read-only file system is the way to be refused a write)."""
    ro, tiny = tmp_path / "ro", tmp_path / "tiny"
    ro.mkdir()
    tiny.mkdir()
    # 300 images of 8x8 whose reports (11 KB) cannot fit in 4 KiB; seeded. Not --dataset digits, whose loader imports
    # scikit-learn's data sets, nor the exact sampler's compiled kernels: 2.8 CPU-s for this command, now 0.6.
    owners = noise_folder(tmp_path / "owners", 300, (8, 8))
    mounts = f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && mount -t tmpfs -o size=4k tmpfs {tiny}"
    script = (
        f"{mounts} || exit 99\n"
        f"{PRIVPIX} ldp fit-encoder --encoder pixel --shape 8x8 --output {ro}/e.npz; echo rc=$?\n"
        f"{PRIVPIX} ldp perturb --encoder {encoder_file} --epsilon 1 --input {owners} --seed 0 --output {tiny}/r -q\n"
        "echo rc=$?\n"
    )
    p = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    if p.returncode == 99:
        pytest.skip(f"mounts refused in the namespace: {p.stderr}")
    errors = p.stderr.strip().splitlines()
    assert p.stdout.split() == ["rc=2", "rc=2"], p.stdout + p.stderr
    assert len(errors) == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"--output {ro}/e.npz: cannot write in {ro}" in errors[0]
    assert f"--output {tiny}/r" in errors[1] and "No space left on device" in errors[1]


# ---------------------------------------------------------------------------------- output paths and names


def test_output_under_a_file_is_refused_before_any_work(run, tmp_path, report_dir):
    (tmp_path / "file.txt").write_text("x")
    bad = tmp_path / "file.txt" / "out"
    r = run("ldp", "train", "--reports", report_dir, "--classifier", "nb", "--json", bad / "r.json")
    _one_error_line(r, "--json", "is a file, not a folder")
    r = run("ldp", "fit-encoder", "--encoder", "pixel", "--shape", "8x8", "--output", bad / "e.npz")
    _one_error_line(r, "--output", "is a file, not a folder")
    r = run("evaluate", "--dataset", "builtin-mnist", "--method", "pixel-laplace", "--json", bad / "x.json")
    _one_error_line(r, "--json", "is a file, not a folder")


def test_file_names_near_the_255_byte_limit(run, tmp_path):
    # 250 bytes fit a file system, but not the temporary file an atomic write goes through.
    name = tmp_path / ("n" * 246 + ".npz")
    r = run("ldp", "fit-encoder", "--encoder", "pixel", "--shape", "8x8", "--output", name)
    _one_error_line(r, "--output", "250 bytes; at most 241 fit")
    r = run("ldp", "train", "--reports", tmp_path / ("r" * 300), "--classifier", "nb")
    _one_error_line(r, "File name too long", "r" * 300)


def test_markup_in_paths_is_printed_literally(run, tmp_path):
    out = tmp_path / "e[/]x[red].npz"
    r = run("ldp", "fit-encoder", "--encoder", "pixel", "--shape", "8x8", "--output", out)
    assert r.exit_code == 0 and f"wrote {out}:" in r.output, r.output
    r = run("ldp", "train", "--reports", tmp_path / "[red]x[/]", "--classifier", "nb")
    _one_error_line(r, "[red]x[/]/manifest.json: not found")


def test_method_labels_are_printed_literally(run, tmp_path):
    r = run("audit", "--method", "dp-pix[b=4,m=1]", "--epsilon", 1, *TINY_AUDIT[:-1], "--json", tmp_path / "[b]a.json")
    assert r.exit_code == 0, r.output
    assert "dp-pix[b=4,m=1]" in r.output and f"wrote {tmp_path / '[b]a.json'}" in r.output


# ------------------------------------------------------------------------------------------------ --size


def test_size_too_large_is_refused_before_allocating(run):
    r = run("evaluate", "--dataset", "builtin-mnist", "--method", "pixel-laplace", "--size", "100000x100000")
    _one_error_line(r, "--size '100000x100000'", "pixels per image")
    r = run("ldp", "fit-encoder", "--encoder", "pixel", "--shape", "100000x100000", "--output", "never.npz")
    _one_error_line(r, "--shape '100000x100000'")
    r = run("ldp", "fit-encoder", "--encoder", "pixel", "--shape", "", "--output", "never.npz")
    _one_error_line(r, "--shape")


@pytest.mark.slow
def test_resize_that_cannot_fit_in_memory_is_refused(run, monkeypatch):
    monkeypatch.setattr("privpix.data.memory.available_memory", lambda: 100 * 2**20)
    args = ("--dataset", "builtin-mnist", "--method", "pixel-laplace", "--limit", 20, "--size", "512x512")
    _one_error_line(run("evaluate", *args), "--size 512x512", "GiB is available")


# --------------------------------------------------------------------------------------------- encoder files


def _rewrite(path: Path, edit) -> None:
    z = dict(np.load(path))
    meta = json.loads(str(z["meta"]))
    edit(z, meta)
    if "meta" in z:
        z["meta"] = np.array(json.dumps(meta))
    np.savez(path, **z)


ENCODER_DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:100]),
    "random bytes": lambda p: p.write_bytes(np.random.default_rng(0).bytes(1000)),
    "another npz": lambda p: np.savez(p, a=np.zeros(3)),
    "meta not an object": lambda p: np.savez(p, meta=np.array("[1, 2]")),
    "bad config": lambda p: _rewrite(p, lambda z, m: m.update(config={"levels": "x"})),
    "missing array": lambda p: _rewrite(p, lambda z, m: z.pop("state_lo")),
    "array of the wrong shape": lambda p: _rewrite(p, lambda z, m: z.update(state_lo=np.zeros(3))),
    "absurd image size": lambda p: _rewrite(p, lambda z, m: m.update(image_shape=[100000, 100000])),
}


@pytest.mark.parametrize("damage", ENCODER_DAMAGE)
def test_damaged_encoder_files_are_one_line(run, encoder_file, image_folder, tmp_path, damage):
    ENCODER_DAMAGE[damage](encoder_file)
    args = ("--encoder", encoder_file, "--epsilon", 1, "--input", image_folder, "--output", tmp_path / "r", "-q")
    line = _one_error_line(run("ldp", "perturb", *args), str(encoder_file))
    assert "allow_pickle" not in line  # numpy's advice to unpickle a file from another party


def test_encoder_that_made_other_reports_is_refused(run, report_dir, tmp_path):
    # Same name and config as the reports' 8x8 encoder, but for 4x4 images.
    other = make_encoder("pixel").fit_unsupervised_shape(4, 4).save(tmp_path / "other.npz")
    args = ("--reports", report_dir, "--classifier", "nb", "--encoder", other, "--test-dataset", "digits:test")
    _one_error_line(run("ldp", "train", *args), f"--encoder {other}: is not the encoder")


# ---------------------------------------------------------------------------------------------- report files


def _set_npz(folder: Path, raw: bytes) -> None:
    """Replace reports.npz and keep the manifest's sha256 right, so the content checks are what is tested."""
    (folder / "reports.npz").write_bytes(raw)
    manifest = json.loads((folder / "manifest.json").read_text())
    import hashlib

    manifest["sha256"] = hashlib.sha256(raw).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _arrays(folder: Path, **arrays) -> None:
    z = dict(np.load(folder / "reports.npz"))
    z.update(arrays)
    buf = io.BytesIO()
    np.savez(buf, **{k: v for k, v in z.items() if v is not None})
    _set_npz(folder, buf.getvalue())


def _manifest(folder: Path, edit) -> None:
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    path.write_text(json.dumps(edit(m)))


REPORT_DAMAGE = {
    "no values array": (lambda f: _arrays(f, values=None), "reports.npz: holds no 'values' array"),
    "float values": (lambda f: _arrays(f, values=np.full((30, 64), 0.5)), "'values' must hold integers"),
    "1-d values": (lambda f: _arrays(f, values=np.zeros(30, np.uint8)), "'values' must have shape (n, m)"),
    "values out of range": (lambda f: _arrays(f, values=np.full((30, 64), 99, np.uint8)), "must lie in [0, 16)"),
    "labels of another length": (lambda f: _arrays(f, labels=np.zeros(5, int)), "'labels' must have shape (30,)"),
    "not an npz": (lambda f: _set_npz(f, b"hello, world"), "reports.npz: not an .npz archive"),
    "manifest without d": (lambda f: _manifest(f, lambda m: {k: v for k, v in m.items() if k != "d"}), "'d'"),
    "manifest a list": (lambda f: _manifest(f, lambda m: [m]), "manifest.json: not a privpix LDP report"),
    "bad epsilon": (lambda f: _manifest(f, lambda m: {**m, "epsilon_per_feature": "x"}), "manifest.json"),
    "file outside": (lambda f: _manifest(f, lambda m: {**m, "file": "../x.npz"}), "is not a file name"),
}


@pytest.mark.parametrize("damage", REPORT_DAMAGE)
def test_damaged_report_files_are_one_line(run, report_dir, damage):
    spoil, needle = REPORT_DAMAGE[damage]
    spoil(report_dir)
    line = _one_error_line(run("ldp", "train", "--reports", report_dir, "--classifier", "nb"), needle)
    assert str(report_dir) in line


# ---------------------------------------------------------------------------------------- torch model files


@pytest.fixture
def model_files(tmp_path) -> dict[str, Path]:
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"meta": json.dumps({"format": "privpix-ppsgan/1"}), "state": {"w": torch.zeros(50)}}, buf)
    files = {
        "truncated": buf.getvalue()[:200],
        "random bytes": np.random.default_rng(0).bytes(1000),
    }
    out = {k: tmp_path / f"{k.replace(' ', '_')}.pt" for k in files}
    for k, raw in files.items():
        out[k].write_bytes(raw)
    for name, blob in {
        "a plain state dict": {"w": torch.zeros(3)},
        "meta not an object": {"meta": "[1]", "state": {"w": torch.zeros(3)}},
        "no weights": {"meta": json.dumps({"format": "privpix-ppsgan/1"}), "state": {}},
        "an obfuscator file": {"meta": json.dumps({"format": "privpix-ae-obfuscator/1"}), "state": {}},
    }.items():
        out[name] = tmp_path / f"{name.replace(' ', '_')}.pt"
        torch.save(blob, out[name])
    return out


def test_damaged_model_files_raise_data_error_naming_them(model_files):
    from privpix.mechanisms.modelfile import load_model_file

    for what, path in model_files.items():
        with pytest.raises(DataError) as info:
            load_model_file(path, "privpix-ppsgan/1", "PPSGAN")
        text = str(info.value)
        assert text.startswith(f"{path}: not a privpix PPSGAN model file"), (what, text)
        assert "weights_only" not in text, (what, text)  # torch's advice to run code from the file


def test_damaged_model_file_through_the_cli(run, model_files):
    path = model_files["truncated"]
    r = run("audit", "--method", "ppsgan", "--param", f"model={path}", "--images", 2, "--trials", 20, "-q")
    _one_error_line(r, f"{path}: not a privpix PPSGAN model file")


# -------------------------------------------------------------------------------- parameters given twice


@pytest.mark.parametrize(
    "method,params,needles",
    [
        ("pixel-laplace", ["unit=pixel", "unit=image"], ["--param unit: given twice"]),
        ("pixel-laplace[unit=pixel,unit=image]", [], ["parameter unit given twice"]),
        ("pixel-laplace[sensitivity=bound]", ["sensitivity=data"], ["sensitivity=bound", "sensitivity=data"]),
    ],
)
def test_a_parameter_given_twice_is_an_error(run, method, params, needles):
    args = ["audit", "--method", method, "--epsilon", 1, *TINY_AUDIT]
    for p in params:
        args += ["--param", p]
    _one_error_line(run(*args), *needles)


def test_pinned_parameter_is_kept_or_refused_in_the_library():
    mech = get_mechanism("pixel-laplace[sensitivity=bound]", epsilon=1, sensitivity="bound")  # agrees: fine
    assert mech.sensitivity == "bound"
    assert get_mechanism("dp-pix[b=4]", epsilon=1, b=4.0).b == 4
    with pytest.raises(ParameterError, match="pins sensitivity=bound"):
        get_mechanism("pixel-laplace[sensitivity=bound]", epsilon=1, sensitivity="data")
    with pytest.raises(ParameterError, match="given twice"):
        parse_method_spec("pixel-laplace[unit=pixel,unit=image]")
    assert parse_method_spec("pixel-laplace[unit=pixel,unit=pixel]") == ("pixel-laplace", {"unit": "pixel"})


def test_evaluate_refuses_a_contradicting_param_before_loading_data(run):
    args = ("--method", "pixel-laplace,pixel-laplace[sensitivity=bound]", "--param", "sensitivity=data")
    _one_error_line(run("evaluate", "--dataset", "mnist", *args), "pins sensitivity=bound", "sensitivity=data")


# ------------------------------------------------------------------------------------ splits and ε lists


@pytest.mark.parametrize("spec,needle", [("builtin-mnist:bogus", "'bogus'"), ("builtin-mnist:test", "--dataset")])
def test_evaluate_refuses_a_split(run, spec, needle):
    r = run("evaluate", "--dataset", spec, "--method", "pixel-laplace", "--epsilon", 1, "--limit", 20, "-q")
    _one_error_line(r, needle)


def test_bench_names_the_split_as_given(run, tmp_path):
    args = ("--methods", "pixel-laplace", "--output", tmp_path / "b", "--limit", 20, "-q")
    line = _one_error_line(run("bench", "--dataset", "builtin-mnist:bogus", *args), "'bogus'")
    assert "bogus:train" not in line


@pytest.mark.parametrize("eps", ["", ",", " , "])
def test_an_empty_epsilon_list_is_an_error(run, tmp_path, eps):
    r = run("evaluate", "--dataset", "builtin-mnist", "--method", "pixel-laplace", "--epsilon", eps, "--limit", 20)
    _one_error_line(r, "--epsilon", "no values given")
    r = run("bench", "--dataset", "builtin-mnist", "--methods", "pixel-laplace", "--epsilon", eps, "--output", tmp_path)
    _one_error_line(r, "--epsilon", "no values given")


def test_epsilon_zero_says_it_must_be_positive(run):
    r = run("evaluate", "--dataset", "builtin-mnist", "--method", "pixel-laplace", "--epsilon", "1,0")
    line = _one_error_line(r, "--epsilon must be > 0, got '0'")
    assert "not a number" not in line
    r = run("ldp", "perturb", "--encoder", "e.npz", "--epsilon", 0, "--dataset", "digits", "--output", "o")
    _one_error_line(r, "--epsilon must be > 0")


# ------------------------------------------------------------------------------------- numeric options


def test_bench_checks_its_numbers_before_writing_into_output(run, tmp_path):
    out = tmp_path / "b"
    r = run("bench", "--dataset", "builtin-mnist", "--methods", "pixel-laplace", "--output", out, "--repeats", 0)
    _one_error_line(r, "--repeats must be >= 1")
    assert not out.exists()  # else a corrected rerun is refused as "a benchmark with different" settings


@pytest.mark.parametrize(
    "args,option",
    [
        (["train-obfuscator", "--dataset", "adult", "--epochs", 0], "--epochs"),
        (["train-obfuscator", "--dataset", "adult", "--lr", -1], "--lr"),
        (["train-obfuscator", "--dataset", "adult", "--batch-size", 0], "--batch-size"),
        (["train-ppsgan", "--dataset", "mnist:train", "--latent", 0], "--latent"),
        (["train-ppsgan", "--dataset", "mnist:train", "--delta", 1], "--delta"),
    ],
)
def test_training_options_out_of_range_are_usage_errors(run, tmp_path, args, option):
    _one_error_line(run(*args, "--output", tmp_path / "m.pt"), option)
