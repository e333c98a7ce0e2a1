"""Faithful decoding (docs/decoding.md), one record per image in a folder, and bounded resources. Every image is
a few pixels written in tmp_path with known values; nothing huge is decoded."""

import struct
import subprocess
import sys
import tracemalloc
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from privpix.data import DEFAULT_MAX_PIXELS, ImageSet, iter_folder, list_image_files, load_folder, read_image, set_mode
from privpix.data import imageset as imageset_module
from privpix.data.files import read_header
from privpix.errors import DataError, ParameterError
from privpix.mechanisms import get_mechanism

# --------------------------------------------------------------------------------------------- helpers


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, depth: int, colour_type: int, rows: list[bytes], *chunks: bytes) -> bytes:
    """A PNG written by hand (Pillow cannot write 16-bit colour, grey + alpha 16-bit or a lying header)."""
    ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0))
    idat = _chunk(b"IDAT", zlib.compress(b"".join(b"\x00" + r for r in rows)))
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"".join(chunks) + idat + _chunk(b"IEND", b"")


def _bomb(path: Path, width: int, height: int) -> Path:
    """A ~100-byte PNG that declares ``width`` x ``height`` grey pixels but holds one row of data."""
    path.write_bytes(_png(width, height, 8, 0, [b"\x00" * 16]))
    return path


def _save(path: Path, im: Image.Image, **kw) -> Path:
    im.save(path, **kw)
    return path


def _pixels(mode: str, values: list) -> Image.Image:
    """A 1-row image of ``mode`` holding ``values`` left to right."""
    im = Image.new(mode, (len(values), 1))
    for x, v in enumerate(values):
        im.putpixel((x, 0), v)
    return im


# ------------------------------------------------------------------------------- every mode, as a viewer


def test_bilevel_grey_and_rgb_keep_their_values(tmp_path):
    one = read_image(_save(tmp_path / "one.png", _pixels("1", [0, 1, 0])))
    assert one.shape == (1, 3, 1) and one[0, :, 0].tolist() == [0, 255, 0]
    grey = read_image(_save(tmp_path / "l.png", _pixels("L", [0, 7, 200])))
    assert grey[0, :, 0].tolist() == [0, 7, 200]
    rgb = read_image(_save(tmp_path / "rgb.png", _pixels("RGB", [(1, 2, 3), (250, 128, 0)])))
    assert rgb.shape == (1, 2, 3) and rgb[0].tolist() == [[1, 2, 3], [250, 128, 0]]
    assert read_image(tmp_path / "l.png", "RGB")[0, 1].tolist() == [7, 7, 7]
    # Colour to grey is ITU-R 601 luma (Pillow's, the same weights as ImageSet.grayscale).
    assert read_image(tmp_path / "rgb.png", "L")[0, :, 0].tolist() == [2, 150]


def test_rgba_la_and_pa_are_composited_on_white(tmp_path):
    rgba = read_image(
        _save(tmp_path / "rgba.png", _pixels("RGBA", [(255, 0, 0, 128), (10, 20, 30, 255), (9, 9, 9, 0)]))
    )
    assert rgba[0].tolist() == [[255, 127, 127], [10, 20, 30], [255, 255, 255]]
    la = read_image(_save(tmp_path / "la.png", _pixels("LA", [(100, 255), (0, 128), (50, 0)])))
    assert la.shape == (1, 3, 1) and la[0, :, 0].tolist() == [100, 127, 255]
    pa = Image.new("PA", (2, 1))
    pa.putpalette([0, 0, 0, 0, 0, 255] + [0] * 762)
    pa.putpixel((0, 0), (1, 255))
    pa.putpixel((1, 0), (1, 0))
    got = read_image(_save(tmp_path / "pa.tif", pa))
    assert got[0].tolist() == [[0, 0, 255], [255, 255, 255]]


def test_palette_images_and_their_transparency(tmp_path):
    p = Image.new("P", (3, 1))
    p.putpalette([255, 0, 0, 0, 255, 0, 30, 30, 30] + [0] * 759)
    for x in range(3):
        p.putpixel((x, 0), x)
    assert read_image(_save(tmp_path / "p.png", p))[0].tolist() == [[255, 0, 0], [0, 255, 0], [30, 30, 30]]
    # A GIF's transparent index shows the background: white.
    got = read_image(_save(tmp_path / "t.gif", p, transparency=1))
    assert got[0].tolist() == [[255, 0, 0], [255, 255, 255], [30, 30, 30]]
    # A PNG palette with partial alpha per entry: (30·128 + 255·127 + 127) // 255 = 142.
    got = read_image(_save(tmp_path / "pt.png", p, transparency=bytes([255, 0, 128])))
    assert got[0].tolist() == [[255, 0, 0], [255, 255, 255], [142, 142, 142]]
    # tRNS colour keys on grey and RGB PNGs.
    lt = _png(2, 1, 8, 0, [bytes([10, 20])], _chunk(b"tRNS", struct.pack(">H", 10)))
    (tmp_path / "lt.png").write_bytes(lt)
    assert read_image(tmp_path / "lt.png")[0, :, 0].tolist() == [255, 20]
    rgbt = _png(2, 1, 8, 2, [bytes([10, 20, 30, 1, 2, 3])], _chunk(b"tRNS", struct.pack(">HHH", 10, 20, 30)))
    (tmp_path / "rgbt.png").write_bytes(rgbt)
    assert read_image(tmp_path / "rgbt.png")[0].tolist() == [[255, 255, 255], [1, 2, 3]]


def test_cmyk_ycbcr_and_lab(tmp_path):
    cmyk = _pixels("CMYK", [(0, 0, 0, 0), (255, 0, 0, 0), (128, 0, 0, 128), (0, 0, 0, 255)])
    got = read_image(_save(tmp_path / "c.tif", cmyk))
    # (255 − C)(255 − K)/255 per channel: the conversion without a colour profile.
    assert got[0].tolist() == [[255, 255, 255], [0, 255, 255], [63, 127, 127], [0, 0, 0]]
    ycc = _pixels("YCbCr", [(128, 128, 128), (76, 85, 255)])
    got = read_image(_save(tmp_path / "y.tif", ycc)).astype(int)
    assert got[0, 0].tolist() == [128, 128, 128] and np.abs(got[0, 1] - [255, 0, 0]).max() <= 1
    # Pillow's LAB holds a and b offset by 128: (L, 128, 128) is a neutral grey. White is D50, hence 254.
    lab = _pixels("LAB", [(255, 128, 128), (128, 128, 128), (0, 128, 128), (128, 200, 128)])
    path = _save(tmp_path / "lab.tif", lab)
    assert Image.open(path).mode == "LAB"
    got = read_image(path).astype(int)
    assert np.abs(got[0] - [[255, 255, 255], [119, 119, 119], [0, 0, 0], [222, 34, 123]]).max() <= 1
    assert read_header(path).grey is False


def test_16_bit_greys_scale_to_8_bits_instead_of_clipping(tmp_path):
    values = [0, 32768, 65535, 1000, 257]
    expect = [0, 128, 255, 4, 1]  # round(v · 255 / 65535)
    for name in ("g16.png", "g16.tif"):
        path = _save(tmp_path / name, Image.fromarray(np.array([values], np.uint16)))
        assert Image.open(path).mode == "I;16"
        assert read_image(path)[0, :, 0].tolist() == expect, name
    # A 16-bit PGM (Pillow: mode I, 0–65535) and a PGM with maxval 1000 (Pillow rescales it to 65535).
    (tmp_path / "g.pgm").write_bytes(b"P5\n3 1\n65535\n" + np.array([65535, 32768, 0], ">u2").tobytes())
    assert read_image(tmp_path / "g.pgm")[0, :, 0].tolist() == [255, 128, 0]
    (tmp_path / "m.pgm").write_bytes(b"P5\n2 1\n1000\n" + np.array([1000, 500], ">u2").tobytes())
    assert read_image(tmp_path / "m.pgm")[0, :, 0].tolist() == [255, 128]
    # 16-bit colour PNGs: Pillow keeps the high byte.
    row = np.array([[65535, 0, 32768]], ">u2").tobytes()
    (tmp_path / "c16.png").write_bytes(_png(1, 1, 16, 2, [row]))
    assert read_image(tmp_path / "c16.png")[0, 0].tolist() == [255, 0, 128]
    # 16-bit grey + alpha: Pillow hands it out as RGBA, but the file is grey, and so is the set.
    row = np.array([32768, 65535, 65535, 0], ">u2").tobytes()
    (tmp_path / "la16.png").write_bytes(_png(2, 1, 16, 4, [row]))
    assert read_header(tmp_path / "la16.png").grey
    assert read_image(tmp_path / "la16.png")[0, :, 0].tolist() == [128, 255]


def test_32_bit_integer_and_float_greys(tmp_path):
    ints = np.array([[0, 2**31 - 1, 2**30, -5]], np.int32)
    path = _save(tmp_path / "i.tif", Image.fromarray(ints))
    assert Image.open(path).mode == "I"
    assert read_image(path)[0, :, 0].tolist() == [0, 255, 128, 0]  # signed 32-bit: 0 … 2**31 − 1
    floats = np.array([[0.0, 0.5, 1.0, 2.0, -1.0, np.nan, 0.25]], np.float32)
    path = _save(tmp_path / "f.tif", Image.fromarray(floats))
    assert Image.open(path).mode == "F"
    assert read_image(path)[0, :, 0].tolist() == [0, 128, 255, 255, 0, 0, 64]  # 0.0 black, 1.0 white


def test_exif_orientation_is_applied(tmp_path):
    arr = np.arange(6, dtype=np.uint8).reshape(2, 3) * 40
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    path = _save(tmp_path / "o.png", Image.fromarray(arr), exif=exif)
    got = read_image(path)[..., 0]
    assert got.shape == (3, 2) and np.array_equal(got, np.rot90(arr, k=-1))
    exif[0x0112] = 3
    got = read_image(_save(tmp_path / "o3.png", Image.fromarray(arr), exif=exif))[..., 0]
    assert np.array_equal(got, arr[::-1, ::-1])


def test_animated_gif_gives_its_first_frame(tmp_path):
    frames = [Image.fromarray(np.full((2, 2, 3), v, np.uint8)) for v in ((200, 0, 0), (0, 0, 200))]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50)
    assert getattr(Image.open(path), "n_frames", 1) == 2
    assert read_image(path)[0, 0].tolist() == [200, 0, 0]


def test_mode_argument_is_checked(tmp_path):
    path = _save(tmp_path / "l.png", _pixels("L", [1]))
    with pytest.raises(ParameterError, match="mode"):
        read_image(path, "CMYK")


# -------------------------------------------------------------------------------------- one mode a set


@pytest.mark.parametrize("colour_first", [True, False])
def test_a_set_of_grey_and_colour_files_decodes_as_rgb_whatever_the_order(tmp_path, colour_first):
    grey_name, colour_name = ("b.png", "a.png") if colour_first else ("a.png", "b.png")
    _save(tmp_path / grey_name, Image.new("L", (3, 2), 90))
    _save(tmp_path / colour_name, Image.new("RGB", (3, 2), (10, 200, 30)))
    s = load_folder(tmp_path)
    assert s.images.shape == (2, 2, 3, 3)
    grey_idx = list(s.names).index(grey_name)
    assert s.images[grey_idx, 0, 0].tolist() == [90, 90, 90]
    assert set_mode(list_image_files(tmp_path)[0]) == "RGB"


def test_a_set_is_grey_only_when_every_header_is_grey(tmp_path):
    _save(tmp_path / "a.png", Image.new("L", (2, 2), 5))
    _save(tmp_path / "b.png", Image.fromarray(np.full((2, 2), 60000, np.uint16)))
    grey_palette = Image.new("P", (2, 2))
    grey_palette.putpalette([v for i in range(256) for v in (i, i, i)])
    _save(tmp_path / "c.png", grey_palette)
    _save(tmp_path / "d.png", Image.new("LA", (2, 2), (7, 255)))
    s = load_folder(tmp_path)
    assert s.images.shape == (4, 2, 2, 1) and s.images[:, 0, 0, 0].tolist() == [5, 233, 0, 7]
    assert set_mode([tmp_path / "a.png", tmp_path / "c.png"]) == "L"
    colour_palette = Image.new("P", (2, 2), 1)  # red: not pixel-identical to any grey file once in RGB
    colour_palette.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    _save(tmp_path / "e.png", colour_palette)
    assert load_folder(tmp_path).images.shape == (5, 2, 2, 3)


# ------------------------------------------------------------------------------------- one record an image


def _three_images(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    for i, v in enumerate((10, 20, 30)):
        _save(folder / f"{'abc'[i]}.png", Image.new("L", (4, 4), v))


def test_symlink_hard_link_and_copy_each_give_one_image(tmp_path):
    _three_images(tmp_path)
    (tmp_path / "sym.png").symlink_to(tmp_path / "a.png")
    (tmp_path / "hard.png").hardlink_to(tmp_path / "b.png")
    (tmp_path / "copy.png").write_bytes((tmp_path / "c.png").read_bytes())
    files, skipped = list_image_files(tmp_path)
    assert sorted(p.name for p, _ in files) == ["a.png", "b.png", "c.png"]
    reasons = {p.name: why for p, why in skipped}
    assert reasons == {
        "copy.png": "duplicate of c.png",
        "hard.png": "same file as b.png (link)",
        "sym.png": "same file as a.png (link)",
    }
    assert len(load_folder(tmp_path)) == 3
    assert sum(len(b) for b in iter_folder(tmp_path, batch_size=2)) == 3


def test_a_linked_class_folder_and_copies_across_classes_count_once(tmp_path):
    _three_images(tmp_path / "cats")
    (tmp_path / "dogs").mkdir()
    _save(tmp_path / "dogs" / "x.png", Image.new("L", (4, 4), 99))
    (tmp_path / "dogs" / "y.png").write_bytes((tmp_path / "cats" / "a.png").read_bytes())
    (tmp_path / "kittens").symlink_to(tmp_path / "cats", target_is_directory=True)
    files, skipped = list_image_files(tmp_path)
    assert [(p.relative_to(tmp_path).as_posix(), c) for p, c in files] == [
        ("cats/a.png", "cats"),
        ("cats/b.png", "cats"),
        ("cats/c.png", "cats"),
        ("dogs/x.png", "dogs"),
    ]
    reasons = {p.relative_to(tmp_path).as_posix(): why for p, why in skipped}
    assert reasons == {"dogs/y.png": "duplicate of cats/a.png", "kittens": "same folder as cats (link)"}


def test_hidden_files_and_folders_are_reported_as_skipped(tmp_path):
    _three_images(tmp_path)
    _save(tmp_path / ".hidden.png", Image.new("L", (4, 4), 1))
    (tmp_path / ".cache").mkdir()
    _save(tmp_path / ".cache" / "thumb.png", Image.new("L", (4, 4), 2))
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "gone.png").symlink_to(tmp_path / "missing.png")
    files, skipped = list_image_files(tmp_path)
    assert [p.name for p, _ in files] == ["a.png", "b.png", "c.png"]
    assert [(p.relative_to(tmp_path).as_posix(), why) for p, why in skipped] == [
        (".cache/thumb.png", "in hidden folder .cache"),
        (".hidden.png", "hidden file"),
        ("gone.png", "broken link"),
        ("notes.txt", "not an image"),
    ]


# ------------------------------------------------------------------------------------------ hostile sizes


def test_a_png_declaring_30000_squared_is_refused_from_its_header(tmp_path, recwarn):
    before = Image.MAX_IMAGE_PIXELS
    path = _bomb(tmp_path / "bomb.png", 30000, 30000)
    assert path.stat().st_size < 200
    for call in (lambda: read_image(path), lambda: list_image_files(tmp_path), lambda: load_folder(tmp_path)):
        with pytest.raises(DataError) as info:
            call()
        msg = str(info.value)
        assert "\n" not in msg and "bomb.png" in msg and "30000x30000" in msg and "150,000,000" in msg
        assert "--max-pixels" in msg
    assert not [w for w in recwarn if issubclass(w.category, Image.DecompressionBombWarning)]
    assert Image.MAX_IMAGE_PIXELS == before  # Pillow's global is untouched afterwards
    # Raised, the limit lets the header through (nothing is decoded here).
    files, _ = list_image_files(tmp_path, max_pixels=10**9)
    assert [p.name for p, _ in files] == ["bomb.png"]
    assert (read_header(path, max_pixels=None).width, read_header(path, 10**9).height) == (30000, 30000)


def test_default_limit_admits_12000_squared_and_refuses_13000_squared(tmp_path):
    assert DEFAULT_MAX_PIXELS == 150_000_000
    ok = _bomb(tmp_path / "ok.png", 12000, 12000)
    assert read_header(ok).width == 12000  # header only: decoding it would take 144 M pixels
    with pytest.raises(DataError, match=r"big\.png: declares 13000x13000 = 169,000,000 pixels"):
        read_header(_bomb(tmp_path / "big.png", 13000, 13000))


def test_max_pixels_is_exact_and_checked(tmp_path):
    path = _save(tmp_path / "a.png", Image.new("RGB", (10, 10), (1, 2, 3)))
    assert read_image(path, max_pixels=100).shape == (10, 10, 3)
    with pytest.raises(DataError, match="10x10 = 100 pixels, over the limit of 99"):
        read_image(path, max_pixels=99)
    assert load_folder(tmp_path, max_pixels=100).images.shape == (1, 10, 10, 3)
    with pytest.raises(DataError, match=r"a\.png"):
        next(iter_folder(tmp_path, max_pixels=99))
    for bad in (0, -1, 1.5, "many"):
        with pytest.raises(ParameterError, match="max_pixels"):
            read_image(path, max_pixels=bad)


def test_pillow_bomb_error_between_its_limit_and_ours_never_escapes(tmp_path, monkeypatch):
    # Pillow refuses at 2 × MAX_IMAGE_PIXELS; with a stricter global set by other code, our limit still rules.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10)
    path = _save(tmp_path / "a.png", Image.new("L", (8, 8), 3))
    assert read_image(path)[0, 0, 0] == 3
    assert Image.MAX_IMAGE_PIXELS == 10


def test_truncated_and_fake_images_give_one_line_errors(tmp_path):
    rng = np.random.default_rng(1)
    good = _png(64, 64, 8, 0, [rng.integers(0, 256, 64, dtype=np.uint8).tobytes() for _ in range(64)])
    for name, data in (("cut.png", good[: len(good) // 2]), ("head.png", good[:40])):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError, match=rf"{name}: not a readable image") as info:
            read_image(tmp_path / name)  # the first fails while decoding, the second on its header
        assert "\n" not in str(info.value)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "fake.jpg").write_bytes(b"not a jpeg at all")
    with pytest.raises(DataError, match=r"fake\.jpg: not a readable image"):
        list_image_files(tmp_path / "sub")


@pytest.mark.integration
def test_cli_release_refuses_the_bomb_with_one_line_and_exit_2(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    _bomb(src / "bomb.png", 30000, 30000)
    privpix = Path(sys.executable).parent / "privpix"
    cmd = [str(privpix), "release", "--input", str(src), "--method", "pixel-laplace", "--param"]
    cmd += ["sensitivity=bound", "--param", "unit=pixel", "--epsilon", "1", "--output", str(tmp_path / "out")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "bomb.png" in lines[0] and "30000x30000" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and "DecompressionBomb" not in r.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


# --------------------------------------------------------------------------- bounded memory, same outputs


def _old_as_float(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float32) / 255.0


def _old_laplace(mech, x8: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The release as it was computed before blocks: whole-array float64, written out literally."""
    x = _old_as_float(x8).astype(np.float64)
    if mech.sensitivity == "data":
        scale = (np.abs(x).sum(axis=(1, 3)).max(axis=1) / mech.epsilon)[:, None, None, None]
    else:
        scale = mech.bound_sensitivity(x.shape[1:]) / mech.epsilon
    out = x + rng.laplace(0.0, 1.0, x.shape) * np.broadcast_to(np.asarray(scale, dtype=np.float64), x.shape)
    return np.asarray(np.clip(out, 0.0, 1.0) if mech.clip else out, dtype=np.float32)


def _old_gaussian(mech, x8: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x = _old_as_float(x8).astype(np.float64)
    out = x + rng.normal(0.0, mech.sigma, x.shape)
    return np.asarray(np.clip(out, 0.0, 1.0) if mech.clip else out, dtype=np.float32)


@pytest.mark.parametrize("block", [1 << 22, 2000, 50])
@pytest.mark.parametrize(
    ("name", "params", "old"),
    [
        ("pixel-laplace", {"sensitivity": "bound", "unit": "pixel"}, _old_laplace),
        ("pixel-laplace", {"sensitivity": "data"}, _old_laplace),
        ("pixel-laplace", {"sensitivity": "bound", "unit": "image", "clip": False}, _old_laplace),
        ("pixel-gaussian", {"sigma": 0.3}, _old_gaussian),
    ],
)
def test_blocked_release_is_bit_for_bit_the_whole_array_release(monkeypatch, block, name, params, old):
    # Blocks of 50 values cut each 17x13x3 image into runs of rows; 2000 groups 3 whole images; the default is one.
    monkeypatch.setattr(imageset_module, "BLOCK_VALUES", block)
    x8 = np.random.default_rng(11).integers(0, 256, (5, 17, 13, 3), dtype=np.uint8)
    x8[2] = 0  # an all-black image: data-derived scale 0
    mech = get_mechanism(name, epsilon=None if name == "pixel-gaussian" else 0.8, **params)
    got = mech.release(ImageSet(x8), np.random.default_rng(2024)).images
    want = old(mech, x8, np.random.default_rng(2024))
    assert got.images.dtype == np.float32 and np.array_equal(got.images, want)
    assert np.array_equal(got.as_uint8(), np.clip(np.rint(want * 255.0), 0, 255).astype(np.uint8))


def test_float_inputs_release_the_same_as_before(monkeypatch):
    monkeypatch.setattr(imageset_module, "BLOCK_VALUES", 64)
    x = np.random.default_rng(3).random((3, 9, 8, 1)).astype(np.float32)
    mech = get_mechanism("pixel-laplace", epsilon=2.0, sensitivity="bound", unit="column")
    got = mech.release(ImageSet(x), 7).images.images
    xx = x.astype(np.float64)
    scale = mech.bound_sensitivity(x.shape[1:]) / 2.0
    want = np.clip(xx + np.random.default_rng(7).laplace(0.0, 1.0, xx.shape) * scale, 0, 1).astype(np.float32)
    assert np.array_equal(got, want)


def test_imageset_conversions_unchanged_and_nan_still_refused(monkeypatch):
    monkeypatch.setattr(imageset_module, "BLOCK_VALUES", 40)
    x8 = np.random.default_rng(4).integers(0, 256, (4, 6, 5, 3), dtype=np.uint8)
    s = ImageSet(x8)
    assert np.array_equal(s.as_float(), _old_as_float(x8)) and s.as_float().dtype == np.float32
    f = np.random.default_rng(5).normal(0.5, 0.6, (4, 6, 5, 3)).astype(np.float32)
    assert np.array_equal(ImageSet(f).as_uint8(), np.clip(np.rint(f * 255.0), 0, 255).astype(np.uint8))
    f[3, 5, 4, 2] = np.nan  # in the very last block
    with pytest.raises(ParameterError, match="NaN"):
        ImageSet(f)


def test_release_memory_is_bounded_by_the_output_not_by_float64_copies(monkeypatch):
    # 1000x1000 RGB: the float32 release is 12 MB; the whole-array path held about ten times that in float64.
    monkeypatch.setattr(imageset_module, "BLOCK_VALUES", 1 << 18)
    s = ImageSet(np.random.default_rng(0).integers(0, 256, (1, 1000, 1000, 3), dtype=np.uint8))
    mech = get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound", unit="pixel")
    out_bytes = 1000 * 1000 * 3 * 4
    tracemalloc.start()
    try:
        rel = mech.release(s, 0)
        u8 = rel.images.as_uint8()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert u8.dtype == np.uint8
    assert peak < 1.6 * out_bytes, f"peak {peak / 1e6:.0f} MB for a {out_bytes / 1e6:.0f} MB release"


def test_decoding_large_images_in_strips_gives_the_same_pixels(tmp_path, monkeypatch):
    from privpix.data import files

    monkeypatch.setattr(files, "_STRIP_PIXELS", 37)  # strips of 1 to 3 rows
    rng = np.random.default_rng(9)
    rgba = rng.integers(0, 256, (23, 17, 4), dtype=np.uint8)
    path = _save(tmp_path / "x.png", Image.fromarray(rgba, "RGBA"))
    monkeypatch.setattr(files, "_STRIP_PIXELS", 1 << 22)
    whole = read_image(path)
    monkeypatch.setattr(files, "_STRIP_PIXELS", 37)
    assert np.array_equal(read_image(path), whole)
    a = rgba[..., 3:].astype(int)
    assert np.array_equal(whole, (rgba[..., :3] * a + 255 * (255 - a) + 127) // 255)


def test_warnings_from_pillow_do_not_leak(tmp_path):
    path = _save(tmp_path / "a.png", Image.new("L", (4, 4), 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_image(path, max_pixels=None)
