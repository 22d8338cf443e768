"""Small local Hugging Face datasets for the hf: tests, built offline: FEMNIST's schema
(``flwrlabs/femnist``: image, writer_id, character, hsf_id) from real mnist-5k digits, and
one CSV tabular set."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# flwrlabs/femnist's character classes: digits, then upper and lower case letters
FEMNIST_CHARACTERS = [*"0123456789", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"abcdefghijklmnopqrstuvwxyz"]
WRITER_SIZES = {"f0003_11": 90, "f0001_42": 70, "f0002_07": 50, "f0000_30": 30}


def femnist_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(uint8 images (N, 28, 28), digit labels, writer ids) of 240 mnist-5k digits; a
    writer's rows are spread through the table, as in the Hub's shards."""
    from fedsim.data.datasets import _mnist_5k_arrays

    images, labels = _mnist_5k_arrays()  # sorted by digit: take every 20th, all ten digits
    n = sum(WRITER_SIZES.values())
    rows = np.arange(n) * (len(labels) // n)
    writers = np.concatenate([[w] * k for w, k in WRITER_SIZES.items()])
    order = np.random.default_rng(0).permutation(n)
    return images[rows, 0], labels[rows], writers[order]


def femnist_features() -> object:
    """flwrlabs/femnist's columns (``datasets.Features``)."""
    import datasets

    return datasets.Features({
        "image": datasets.Image(),
        "writer_id": datasets.Value("string"),
        "character": datasets.ClassLabel(names=FEMNIST_CHARACTERS),
        "hsf_id": datasets.Value("int64"),
    })  # fmt: skip


def femnist_dataset(images: np.ndarray | None = None) -> object:
    """A ``datasets.Dataset`` in flwrlabs/femnist's schema (PIL 28x28 grey images)."""
    import datasets
    from PIL import Image

    pixels, labels, writers = femnist_rows()
    images = pixels if images is None else images
    features = femnist_features()
    return datasets.Dataset.from_dict(
        {
            "image": [Image.fromarray(p, mode="L") for p in images],
            "writer_id": list(writers),
            "character": [int(y) for y in labels],
            "hsf_id": [int(w[-2:]) % 4 for w in writers],
        },
        features=features,
    )


def save_femnist(folder: Path) -> tuple[Path, Path]:
    """The FEMNIST-schema set saved with save_to_disk (``folder/femnist``) and as one parquet
    file (``folder/femnist.parquet``)."""
    ds = femnist_dataset()
    ds.save_to_disk(str(folder / "femnist"))
    ds.to_parquet(str(folder / "femnist.parquet"))
    return folder / "femnist", folder / "femnist.parquet"


def save_tabular_csv(path: Path, rows: int = 240) -> Path:
    """A CSV of 4 numeric features, a string label (which feature is largest) and a site."""
    rng = np.random.default_rng(1)
    features = rng.normal(size=(rows, 4)).round(4)
    names = np.array(["north", "east", "south", "west"])
    lines = ["f0,f1,f2,f3,label,site"]
    for i, x in enumerate(features):
        lines.append(",".join(map(str, x)) + f",{names[x.argmax()]},s{i % 3}")
    path.write_text("\n".join(lines) + "\n")
    return path


# CelebA's 40 binary attributes (flwrlabs/celeba keeps them as bool columns beside image and
# celeb_id; LEAF's task is one of them, Smiling)
CELEBA_ATTRIBUTES = (
    "5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose "
    "Black_Hair Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses "
    "Goatee Gray_Hair Heavy_Makeup High_Cheekbones Male Mouth_Slightly_Open Mustache "
    "Narrow_Eyes No_Beard Oval_Face Pale_Skin Pointy_Nose Receding_Hairline Rosy_Cheeks "
    "Sideburns Smiling Straight_Hair Wavy_Hair Wearing_Earrings Wearing_Hat Wearing_Lipstick "
    "Wearing_Necklace Wearing_Necktie Young"
).split()
CELEB_SIZES = {7: 30, 3: 20, 5: 10}


def save_celeba(folder: Path) -> Path:
    """60 colour 178x218 (W x H) images in CelebA's layout, made from mnist-5k digits, three
    celebrities (celeb_id), Smiling true for even digits; saved with save_to_disk."""
    import datasets
    from PIL import Image

    pixels, labels, _ = femnist_rows()
    n = sum(CELEB_SIZES.values())
    celebs = np.concatenate([[c] * k for c, k in CELEB_SIZES.items()])
    images = []
    for p in pixels[:n]:
        grey = np.asarray(Image.fromarray(p).resize((178, 218)))
        images.append(Image.fromarray(np.stack([grey, grey // 2, 255 - grey], axis=2)))
    columns: dict = {"image": images, "celeb_id": [int(c) for c in celebs]}
    features = {"image": datasets.Image(), "celeb_id": datasets.Value("int64")}
    for k, attribute in enumerate(CELEBA_ATTRIBUTES):
        columns[attribute] = [bool(y % 2 == 0) if attribute == "Smiling" else bool((y + k) % 3)
                              for y in labels[:n]]  # fmt: skip
        features[attribute] = datasets.Value("bool")
    ds = datasets.Dataset.from_dict(columns, features=datasets.Features(features))
    ds.save_to_disk(str(folder / "celeba"))
    return folder / "celeba"


# Real lines (Hamlet III.1, Macbeth V.5, Romeo and Juliet II.2), one role each
SPEECHES = {
    "HAMLET_HAMLET": "To be, or not to be, that is the question: Whether 'tis nobler in the "
    "mind to suffer the slings and arrows of outrageous fortune, or to take arms against a sea "
    "of troubles, and by opposing end them. To die: to sleep; no more; and by a sleep to say we "
    "end the heart-ache and the thousand natural shocks that flesh is heir to.",
    "MACBETH_MACBETH": "To-morrow, and to-morrow, and to-morrow, creeps in this petty pace "
    "from day to day, to the last syllable of recorded time; and all our yesterdays have "
    "lighted fools the way to dusty death. Out, out, brief candle!",
    "ROMEO_JULIET": "O Romeo, Romeo! wherefore art thou Romeo? Deny thy father and refuse "
    "thy name; or, if thou wilt not, be but sworn my love, and I'll no longer be a Capulet.",
}


def save_shakespeare(folder: Path) -> tuple[Path, dict[str, int]]:
    """flwrlabs/shakespeare's layout (character_id, x: 80 characters, y: the next one), every
    window of each speech, saved with save_to_disk; and the windows per role."""
    import datasets

    rows: dict[str, list[str]] = {"character_id": [], "x": [], "y": []}
    counts = {}
    for role, text in SPEECHES.items():
        counts[role] = len(text) - 80
        for i in range(len(text) - 80):
            rows["character_id"].append(role)
            rows["x"].append(text[i : i + 80])
            rows["y"].append(text[i + 80])
    datasets.Dataset.from_dict(rows).save_to_disk(str(folder / "shakespeare"))
    return folder / "shakespeare", counts
