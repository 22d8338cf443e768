"""``fedsim compare``'s output: the methods' table with intervals and costs, the clients
hurt and paired differences against each reference, a figure of each (``compare.py`` makes
the numbers)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from fedsim.search.compare import (
    COLUMNS,
    COSTS,
    LOWER_IS_BETTER,
    OPTIONAL,
    PAIRED_TEST,
    Method,
    compare_methods,
    supported,
)
from fedsim.tracking.clients_hurt import Z, plot_clients_hurt


def interval_cell(row: dict[str, Any], key: str, scale: float = 100.0, digits: int = 2) -> str:
    """``mean [lo, hi]`` (the 95 % interval over seeds), the mean alone for one seed."""
    mean, lo, hi = (row[f"{key}_{k}"] for k in ("mean", "lo", "hi"))
    if math.isnan(mean):
        return "n/a"
    if math.isnan(lo):
        return f"{scale * mean:.{digits}f}"
    return f"{scale * mean:.{digits}f} [{scale * lo:.{digits}f}, {scale * hi:.{digits}f}]"


def difference_cell(d: dict[str, float]) -> str:
    """``+1.23 [-0.40, 2.86] p=0.06`` in points, ``*`` when the seeds support it."""
    if math.isnan(d["mean"]):
        return "n/a"
    text = f"{100 * d['mean']:+.2f}"
    if not math.isnan(d["lo"]):
        text += f" [{100 * d['lo']:+.2f}, {100 * d['hi']:+.2f}]"
    if not math.isnan(d["p"]):
        text += f" p={d['p']:.3f}" + (" *" if supported(d) else "")
    return text


def optional_columns(rows: list[dict]) -> list[str]:
    """The ``OPTIONAL`` columns some method has a number for."""
    return [k for k in OPTIONAL if any(not math.isnan(r[f"{k}_mean"]) for r in rows)]


def methods_markdown(rows: list[dict]) -> str:
    """One row per method: accuracy columns in percent, perplexities as they are (lower is
    better), costs per client round."""
    extra = optional_columns(rows)
    heads = [*COLUMNS.values(), *(OPTIONAL[k] for k in extra), *COSTS.values()]
    lines = ["| method | seeds | " + " | ".join(heads) + " |",
             "|---|---:|" + "---:|" * len(heads)]  # fmt: skip
    for row in rows:
        cells = [interval_cell(row, k) for k in COLUMNS]
        cells += [interval_cell(row, k, scale=1.0 if k in LOWER_IS_BETTER else 100.0)
                  for k in extra]  # fmt: skip
        cells += [interval_cell(row, k, scale=1.0, digits=3) for k in COSTS]
        lines.append(f"| {row['label']} | {row['seeds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def gain_cell(d: dict[str, float] | None, metric: str) -> str:
    """The gain over clients and seeds (``client_difference``): on perplexity the loss per
    token in nats (> 0: lower perplexity) with the perplexity ratio exp(-gain), else
    accuracy points; ``[95 % interval] p=``, ``*`` when the clients support it."""
    if not d or math.isnan(d["mean"]):
        return "n/a"
    nats = metric == "perplexity"
    scale, digits = (1.0, 3) if nats else (100.0, 2)
    text = f"{scale * d['mean']:+.{digits}f}"
    if not math.isnan(d["lo"]):
        text += f" [{scale * d['lo']:+.{digits}f}, {scale * d['hi']:+.{digits}f}]"
    if not math.isnan(d["p"]):
        text += f" p={d['p']:.3f}" + (" *" if supported(d) else "")
    if nats:
        text += f" (ppl x{math.exp(-d['mean']):.3f})"
    return text


def versus_markdown(reference: str, rows: list[dict]) -> str:
    """Against one reference: clients worse / better / within noise (mean share over the
    paired seeds), the worst client's loss, the gain on the reported metric over clients
    and seeds (its paired t test over clients named in the header), and the paired accuracy
    differences over seeds."""
    metric = rows[0].get("metric", "accuracy") if rows else "accuracy"
    unit = "loss/token, nats" if metric == "perplexity" else "acc, points"
    held = any(r.get("held_out_gain") for r in rows)
    gain_heads = f"Δ {metric} per client ({unit}; paired t over clients x seeds)"
    gain_heads += " | Δ held-out" if held else ""
    lines = [
        f"| vs {reference} | seeds | worse | better | within noise | worst client's loss "
        f"| {gain_heads} | Δ acc (final) | Δ acc (val-selected) |",
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if held else "") + "---:|---:|",
    ]
    for r in rows:
        worse_held = ""
        if "held_out_worse" in r:
            worse_held = f" (held-out: {100 * r['held_out_worse']:.0f}%)"
        gains = gain_cell(r.get("gain"), metric)
        gains += f" | {gain_cell(r.get('held_out_gain'), metric)}" if held else ""
        lines.append(
            f"| {r['label']} | {r['pairs']} | {100 * r['worse']:.0f}%{worse_held} | "
            f"{100 * r['better']:.0f}% | {100 * r['within']:.0f}% | "
            f"{100 * r['worst_loss']:.1f} | {gains} | {difference_cell(r['acc'])} | "
            f"{difference_cell(r['val_acc'])} |"
        )
    return "\n".join(lines) + "\n"


def notes(against: dict[str, list[dict]]) -> str:
    """What each number was selected on, and how the tests and the noise are defined."""
    selection = {r["selection"] for rows in against.values() for r in rows}
    where = ", ".join(sorted(selection)) or "-"
    return (
        "Accuracy is the test split's sample-weighted accuracy (acc_weighted), in percent; "
        "*final*: the last round, no selection; *val-selected*: the round best on the "
        "clients' validation splits (eval.validation_ratio), n/a for runs without one. "
        "Cells: mean over seeds [95 % t interval]. Costs: FLOPs of local training (forward "
        "and backward, the algorithm's extra passes included; eval.count_flops) and the MB a "
        "trained client sends and receives, per client round.\n\n"
        f"Clients hurt are read at each run's {where}: per client, the accuracy minus the "
        f"reference's on the same seed; within noise when at most {Z} standard errors of "
        "the difference of the two accuracies on that client's test samples. Δ acc: paired "
        f"over seeds, in points [95 % interval], with the {PAIRED_TEST}; * marks a "
        "difference the seeds support (p < 0.05).\n\n" + gain_note(against)
        + perplexity_note(against)
    )


def gain_note(against: dict[str, list[dict]]) -> str:
    """How the gain over clients and seeds is computed (empty without a reference)."""
    rows = [r for vs in against.values() for r in vs]
    if not rows:
        return ""
    what = ("the reference's mean test loss per token minus the method's, in nats, > 0 "
            "better; ppl x: the ratio exp(-gain) of the perplexities' geometric mean"
            if any(r.get("metric") == "perplexity" for r in rows)
            else "the method's accuracy minus the reference's, in points")  # fmt: skip
    return (
        f"Δ per client: each client's gain on the reported metric ({what}) at each run's "
        "selected round, averaged over the seeds both ran; then the mean over the clients "
        "[95 % t interval] and the two-sided paired t test over clients (scipy.stats."
        "ttest_1samp of those gains against 0, i.e. ttest_rel of the two methods' per-client "
        "values): the client is the unit, its seeds are averaged, not counted as draws; * "
        "where p < 0.05. Held-out clients apart.\n"
    )


def perplexity_note(against: dict[str, list[dict]]) -> str:
    """How clients hurt are judged where the table reports perplexity (next-token runs)."""
    if not any(r.get("metric") == "perplexity" for rows in against.values() for r in rows):
        return ""
    return (
        "\nNext-token runs are judged on perplexity instead: per client, the reference's mean "
        "test loss per token minus the run's (> 0: a lower perplexity), within noise when at "
        f"most {Z} standard errors of that difference over the client's test tokens "
        "(sqrt((sd_a^2 + sd_r^2) / n), sd the spread of each run's per-token losses, "
        "clients.csv's loss_sd); the worst client's loss is then in log-perplexity x 100.\n"
    )


def comparison_markdown(rows: list[dict], against: dict[str, list[dict]]) -> str:
    """The whole comparison: methods, then each reference's table, then the notes."""
    parts = [methods_markdown(rows)]
    parts += [versus_markdown(ref, vs) for ref, vs in against.items() if vs]
    return "\n".join([*parts, notes(against) + optional_notes(optional_columns(rows))])


def optional_notes(extra: list[str]) -> str:
    """What the optional columns shown mean (empty when none is)."""
    text = ""
    if {"ppl", "val_ppl", "unseen_ppl"} & set(extra):
        text += ("Perplexity: exp of the mean next-token loss over every test token of the "
                 "trained (or held-out) clients; lower is better. ")  # fmt: skip
    if any(k.startswith("unseen") for k in extra):
        text += "Held-out: clients that never trained (eval.holdout_clients)."
    return f"\n{text.rstrip()}\n" if text else ""


def write_csv(path: Path, rows: list[dict]) -> Path:
    """The methods' rows (every mean, std and interval bound) as CSV."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def plotted_metric(rows: list[dict]) -> tuple[tuple[str, str], str, float, bool]:
    """What methods.png draws: perplexity where every method has it (language models: the
    table's own metric, lower is better, on a log scale), else accuracy in %. Returns the
    (final, val-selected) keys, the axis label, the scale factor and whether the axis is log."""
    if rows and all(not math.isnan(row.get("ppl_mean", math.nan)) for row in rows):
        return ("ppl", "val_ppl"), "test perplexity (lower is better)", 1.0, True
    return ("acc", "val_acc"), "test accuracy (%)", 100.0, False


def plot_methods(rows: list[dict], methods: list[Method], path: Path) -> Path:
    """Each method's final and val-selected metric (``plotted_metric``: perplexity for
    language models, else accuracy): seeds as dots, the mean with its 95 % interval as a bar."""
    from fedsim.search.compare import run_numbers
    from fedsim.tracking.report import pyplot, save_figure

    keys, label, scale, log = plotted_metric(rows)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(rows)), 4))
    for offset, key in zip((-0.15, 0.15), keys, strict=True):
        for i, (row, method) in enumerate(zip(rows, methods, strict=True)):
            if math.isnan(row[f"{key}_mean"]):
                continue
            mean, lo, hi = (scale * row[f"{key}_{k}"] for k in ("mean", "lo", "hi"))
            err = None if math.isnan(lo) else [[mean - lo], [hi - mean]]
            ax.errorbar(i + offset, mean, yerr=err, fmt="o", capsize=4,
                        color="C0" if key == keys[0] else "C1",
                        label={**COLUMNS, **OPTIONAL}[key] if i == 0 else None)  # fmt: skip
            seeds = [scale * run_numbers(r)[key] for r in method.runs.values()]
            ax.plot([i + offset] * len(seeds), seeds, ".", color="grey", alpha=0.6)
    ax.set_xticks(range(len(rows)), [r["label"] for r in rows], rotation=20, fontsize=8)
    ax.set_ylabel(label)
    if log:
        ax.set_yscale("log")
    ax.set_title("mean over seeds with 95 % interval; dots: seeds", fontsize=9)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def per_client_section(methods: list[Method]) -> str:
    """compare.md's per-client table of the reported metric (``hurt_metric.py``)."""
    from fedsim.tracking.hurt_metric import client_table_markdown

    table = client_table_markdown(methods)
    return f"\n## Per client\n\n{table}" if table else ""


def write_comparison(methods: list[Method], references: list[str], out: Path) -> list[Path]:
    """compare.md, compare.csv, plots/methods.png and, per reference, plots/clients_vs_
    <reference>.png (the lowest paired seed's per-client differences) in ``out``."""
    rows, against = compare_methods(methods, references)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    md = out / "compare.md"
    md.write_text(comparison_markdown(rows, against) + per_client_section(methods))
    written = [md, write_csv(out / "compare.csv", rows)]
    written.append(plot_methods(rows, methods, out / "plots" / "methods.png"))
    for ref, vs in against.items():
        if vs:
            pairs = [(r["label"], r["hurt"][0]) for r in vs]  # the lowest paired seed's
            name = "_".join("".join(c if c.isalnum() else " " for c in ref).split())
            path = out / "plots" / f"clients_vs_{name}.png"
            written.append(plot_clients_hurt(pairs, ref, path, f"seed {vs[0]['seeds'][0]}"))
    return written


__all__ = ["comparison_markdown", "interval_cell", "write_comparison"]
