"""How a folder of images becomes a dataset (ImageOptions), how a file's split and label are decided, and the
dataset's schema as Arrow and petastorm read it."""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hopsml.data import pixels
from hopsml.data import unischema as petastorm_schema
from hopsml.errors import SettingsError

if TYPE_CHECKING:
    import pyarrow as pa


ALL = "all"                      # the one split of a dataset written with test_fraction=0


TRAIN, TEST = "train", "test"


# every extension Pillow decodes, in lower or upper case
DEFAULT_GLOB = "*.{" + ",".join(f"{ext},{ext.upper()}" for ext in pixels.readable_extensions()) + "}"


IMAGE_FORMATS = ("png", "jpeg")


UNREADABLE_FILE = "unreadable file"


LINK_OUTSIDE = "symlink leaving the source folder"


LINK_INSIDE = "symlink within the source folder (links are not followed: each file is listed by its own path)"


LINK_BROKEN = "broken symlink"


HARD_LINK = "another name of a file already listed (hard link)"


TARGET_SHARD_BYTES = 64 << 20   # input bytes per partition when nothing else asks for more


ROW_GROUP_BYTES = 16 << 20      # Parquet row groups of about this many bytes of pixels


# The pixels are stored uncompressed: snappy left 224x224 photo cells at 1.000 of their size and
# cost 0.09 ms of CPU per image, 3% of the job's work per image.
PARQUET_CODECS = {"image": "none", "label": "snappy", "label_text": "snappy", "path": "snappy"}


@dataclass(frozen=True)
class ImageOptions:
    """How images are turned into a dataset; validates itself."""

    resize: tuple[int, int] | None = (200, 200)
    crop: tuple[int, int] | None = None
    image_format: str = "png"
    glob: str = DEFAULT_GLOB
    shards: int | None = None
    strict: bool = False
    overwrite: bool = False
    draft: bool = True
    compression: str | None = None   # of the TFRecord shards: None or "gzip"
    test_fraction: float = 0.2
    seed: int = 0
    max_file_mb: float = 256.0   # larger files are rejected, unread

    def __post_init__(self) -> None:
        for name in ("resize", "crop"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, pixels._check_size(name, value))
        if self.resize is None and self.crop is None:
            raise SettingsError("give resize or crop (or both): every image in a dataset needs one "
                                "fixed size, so a batch reader can stack them")
        if self.resize and self.crop and (self.crop[0] > self.resize[0] or self.crop[1] > self.resize[1]):
            raise SettingsError(f"crop={self.crop} is larger than resize={self.resize}; "
                                "the crop must fit inside the resized image")
        if self.image_format not in IMAGE_FORMATS:
            raise SettingsError(f"image_format={self.image_format!r}: use 'png' (lossless) or 'jpeg'")
        if self.shards is not None and int(self.shards) < 1:
            raise SettingsError(f"shards={self.shards!r} must be at least 1")
        try:
            fraction = float(self.test_fraction)
        except (TypeError, ValueError):
            fraction = float("nan")
        if not 0.0 <= fraction < 1.0:
            raise SettingsError(f"test_fraction={self.test_fraction!r} must be at least 0 and below 1 "
                                "(0 writes a single split 'all')")
        object.__setattr__(self, "test_fraction", fraction)
        object.__setattr__(self, "seed", int(self.seed))
        if not float(self.max_file_mb) > 0:
            raise SettingsError(f"max_file_mb={self.max_file_mb!r} must be above 0 (larger files are rejected)")

    @property
    def applied(self) -> str:
        """What is done to every image, in words, for the job's summary line.

        >>> ImageOptions(resize=(224, 224)).applied
        'resized to 224x224 (aspect ratio not kept), not cropped'
        >>> ImageOptions(resize=None, crop=(28, 28)).applied
        'not resized, center-cropped to 28x28'
        """
        resize = (f"resized to {self.resize[0]}x{self.resize[1]} (aspect ratio not kept)"
                  if self.resize else "not resized")
        crop = f"center-cropped to {self.crop[0]}x{self.crop[1]}" if self.crop else "not cropped"
        return f"{resize}, {crop}"

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of every output image."""
        return self.crop or self.resize  # type: ignore[return-value]

    @property
    def shape(self) -> tuple[int, int, int]:
        width, height = self.size
        return (height, width, 3)

    @property
    def splits(self) -> tuple[str, ...]:
        return (TRAIN, TEST) if self.test_fraction > 0 else (ALL,)


def split_of(key: str, test_fraction: float, seed: int = 0) -> str:
    """The split of an image: 'test' for about ``test_fraction`` of all keys, else 'train'
    ('all' when ``test_fraction`` is 0). ``key`` is the image's path relative to the source
    folder, so the split is the same on every machine, in every run, wherever the tree lies.

    >>> split_of("cat/001.jpg", 0.0)
    'all'
    >>> [split_of(f"cat/{i:03d}.jpg", 0.5, seed=7) for i in range(6)]
    ['train', 'test', 'train', 'train', 'test', 'train']
    """
    if test_fraction <= 0:
        return ALL
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8,
                             key=int(seed).to_bytes(8, "little", signed=True)).digest()
    return TEST if int.from_bytes(digest, "little") < test_fraction * 2.0 ** 64 else TRAIN


def relative_key(path: str, base: str) -> str:
    """``path`` relative to the source folder ``base`` (a path without scheme), as split_of keys it.

    >>> relative_key("file:/data/pets/cat/1.jpg", "/data/pets")
    'cat/1.jpg'
    >>> relative_key("hdfs://nn:8020/data/pets/dog/2.png", "/data/pets/")
    'dog/2.png'
    """
    base = base.rstrip("/") + "/"
    at = path.find(base)
    return path[at + len(base):] if at >= 0 else path


def unischema(shape: tuple[int, int, int]) -> bytes:
    """petastorm's Unischema of an image dataset, pickled without petastorm (see
    :mod:`hopsml.data.unischema`): image (H, W, 3) uint8, label, label text, path."""
    return petastorm_schema.unischema_pickle("ImageSchema", petastorm_schema.image_fields(shape))


def arrow_schema() -> pa.Schema:
    """The Parquet columns of an image dataset, as Spark would write the Unischema's Spark schema."""
    import pyarrow as pa

    return pa.schema([pa.field("image", pa.binary(), nullable=False),
                      pa.field("label", pa.int32(), nullable=False),
                      pa.field("label_text", pa.string(), nullable=False),
                      pa.field("path", pa.string(), nullable=False)])


def label_of(path: str) -> str:
    """The label of an image: the name of the folder it is in."""
    return posixpath.basename(posixpath.dirname(path.rstrip("/")))
