"""Sample input that ships with hopsml: scikit-learn's digits as a folder tree of PNG files, and a
small CSV table, each with a few deliberately bad entries, for the quickstart, notebooks and tests.
"""

from __future__ import annotations

import io
import os

import numpy as np
from PIL import Image

from hopsml.data import pixels

TABLE_COLUMNS = ("sepal_length", "sepal_width", "petal_length", "petal_width", "petal_size", "species")


def write_digits(folder: str, *, limit: int | None = None, size: int = 32,
                 bad_files: bool = True) -> dict[str, int]:
    """Write the digits as ``folder/<digit>/<n>.png`` (grayscale, ``size`` pixels square).

    With ``bad_files`` a few problem files join them: a zero-byte file, a text file named .png,
    a truncated PNG (all rejected), and an RGBA PNG and a CMYK JPEG (both converted).
    Returns counts: images, bad (to be rejected), convertible.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    images, targets = digits.images, digits.target
    if limit is not None:
        images, targets = images[:limit], targets[:limit]
    for index, (digit, target) in enumerate(zip(images, targets)):
        label_dir = os.path.join(folder, str(int(target)))
        os.makedirs(label_dir, exist_ok=True)
        gray = Image.fromarray((digit * (255 / 16)).astype(np.uint8), "L")
        gray.resize((size, size), Image.Resampling.BILINEAR).save(
            os.path.join(label_dir, f"{index:04d}.png"), compress_level=1)
    counts = {"images": len(images), "bad": 0, "convertible": 0}
    if bad_files:
        bad_dir = os.path.join(folder, str(int(targets[0])))
        with open(os.path.join(bad_dir, "empty.png"), "wb"):
            pass
        with open(os.path.join(bad_dir, "notes.png"), "w") as text:
            text.write("this is not an image\n")
        noise = np.random.default_rng(0).integers(0, 256, (size, size), dtype=np.uint8)
        good = pixels.encode_png(noise)
        with open(os.path.join(bad_dir, "truncated.png"), "wb") as truncated:
            truncated.write(good[: len(good) // 2])
        rgba = np.zeros((size, size, 4), np.uint8)
        rgba[..., 3] = 255
        Image.fromarray(rgba, "RGBA").save(os.path.join(bad_dir, "rgba.png"))
        cmyk = io.BytesIO()
        Image.new("CMYK", (size, size), (0, 0, 0, 255)).save(cmyk, "JPEG")
        with open(os.path.join(bad_dir, "cmyk.jpg"), "wb") as out:
            out.write(cmyk.getvalue())
        counts["bad"], counts["convertible"] = 3, 2
    return counts


def write_table(path: str, *, header: bool = True, bad_rows: bool = True, seed: int = 0) -> dict[str, int]:
    """Write scikit-learn's iris as a CSV with a derived categorical column ``petal_size``.

    With ``bad_rows``: some cells are '?' (missing), some values carry spaces around them, one row
    has too few fields and one an unparsable number. Returns counts: rows, malformed, missing.
    """
    from sklearn.datasets import load_iris

    iris = load_iris()
    rng = np.random.default_rng(seed)
    names = iris.target_names
    lines = [",".join(TABLE_COLUMNS)] if header else []
    missing_rows = set(rng.choice(len(iris.data), size=6, replace=False).tolist()) if bad_rows else set()
    for index, (row, target) in enumerate(zip(iris.data, iris.target)):
        size = "small" if row[2] < 2.5 else ("medium" if row[2] < 5.0 else "large")
        cells = [f"{v:.1f}" for v in row] + [size, str(names[target])]
        if index in missing_rows:
            cells[index % 5] = "?"
        if bad_rows and index % 25 == 3:
            cells[4] = f"  {cells[4]} "
        lines.append(",".join(cells))
    malformed = 0
    if bad_rows:
        lines.insert(len(lines) // 2, "5.0,3.4,1.5,setosa")          # too few fields
        lines.insert(len(lines) // 3, "5.1,three,1.4,0.2,small,setosa")  # unparsable number
        malformed = 2
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")
    return {"rows": len(iris.data) + malformed, "malformed": malformed, "missing": len(missing_rows)}
