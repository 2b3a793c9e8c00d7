"""Detection quality on real labelled data: SKAB's fault files through file mode's engine,
scored with SKAB's own protocols.

SKAB (Skoltech Anomaly Benchmark, github.com/waico/SKAB, its ``data/`` folder; GPL-3, so it is
read from where it lies, never copied here) is a water-pump testbed: 8 sensors about once a
second, 34 experiments with a labelled fault each in ``valve1/``, ``valve2/`` and ``other/``.
Each file goes, as one device, through :func:`~fleetwatch.filemode.scoring.detect_frame` — what
``fleetwatch detect`` runs, online and causal: each chunk of rows is scored with what was
learned from earlier chunks only — on the 8 sensor columns (the labels are kept out). A row is
flagged when its ``alert`` is true.

Scored as SKAB's leaderboard is (:mod:`fleetwatch.evaluation.skab`): rows from ``--train-rows``
(SKAB's 400) on; the detector learns online from the rows before. Outlier protocol: F1, FAR %,
MAR % of rows, counts summed over files. Changepoint protocol: NAB standard / low FP / low FN
with a 60 s window after each labelled changepoint, detections = every change of the alert flag
(on and off), as SKAB's own notebooks turn an outlier detector's flags into changepoints
(``prediction_cp = abs(prediction.diff())``, the first row counting when flagged): these are
``nab_standard``, ``nab_low_fp``, ``nab_low_fn``. Also from alert openings alone (the first row
of each run of alerting rows; file mode has no episode of its own, so a run is an episode:
``nab_*_openings``) and from every alerting row (``nab_standard_rows``). ``whole_file`` scores
every row. ``nab_*_labels`` is what the labels themselves score as flags — alerts that start
and end with each fault — on the changepoint protocol: how far from that the detector's
``nab_*`` is. SKAB marks most faults with four changepoints, two at its start and two at its
end, each pair about 57 s apart, so the windows are in pairs and such alerts detect the first
of each pair only.

``--detectors KIND[,KIND...]`` runs a combined detector of those registered kinds (default
hyperparameters) instead of the default one, to compare candidates on the same files.

    python bench/quality/realdata.py --skab DIR [--limit N] [--train-rows 400] [--chunk-rows 50]
        [--detectors KINDS] [--split all|tuning|held-out]
        [--device-calibration]

Last line: {"outlier_f1", "far_pct", "mar_pct", "far_overrun_pct", "far_early_pct",
"far_apart_pct" (``far_pct`` split by where the false rows lie: in an alert that outlasted its
fault, within the window before a fault, apart from any; :mod:`fleetwatch.evaluation.false_rows`),
"nab_standard", "nab_low_fp", "nab_low_fn",
"nab_standard_openings", "nab_low_fp_openings", "nab_low_fn_openings", "nab_standard_rows",
"nab_standard_labels", "nab_low_fp_labels", "nab_low_fn_labels", "windows_detected_labels",
"episodes", "anomalies", "episodes_per_anomaly", "score_ap" (average precision of
``anomaly_score`` against the row labels, pooled over the scored rows: whether the score ranks),
"score_ap_random" (what a random order gives), "score_saturated_pct" (rows scoring >= 0.999),
"rows" (run through the engine), "detectors",
"scored_rows", "files", "rows_per_s" (the engine's), "seconds", "train_rows", "loadavg_1m"
(at the start), "loadavg_1m_end", "categories": {category: figures}, "whole_file": figures}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.evaluation.bootstrap import interval
from fleetwatch.evaluation.changepoints import LOW_FN, LOW_FP, SKAB_WINDOW_MS, STANDARD
from fleetwatch.evaluation.ranking import average_precision, saturated_share
from fleetwatch.evaluation.skab import SKAB_TRAIN_ROWS, SkabTally, score_file
from fleetwatch.filemode.scoring import DEFAULT_CHUNK_ROWS, detect_frame
from fleetwatch.models.base import Detector
from fleetwatch.models.registry import Tuning, default_detector, detector_factory

CATEGORIES = ("valve1", "valve2", "other")
TUNING = ("valve1",)
"""The files detection may be tuned on; the rest (``valve2/``, ``other/``) are held out."""
SPLITS = {
    "all": CATEGORIES,
    "tuning": TUNING,
    "held-out": tuple(c for c in CATEGORIES if c not in TUNING),
}
"""``--split``: the categories each run reads."""
TIME = "datetime"
LABELS = ("anomaly", "changepoint")
FLAG = "alert"
WHERE = (
    "SKAB is not here. Get it from https://github.com/waico/SKAB (the data/ folder: valve1/, "
    "valve2/, other/), e.g. `git clone --depth 1 https://github.com/waico/SKAB`, and pass "
    "--skab SKAB/data"
)


def skab_files(root: Path, limit: int | None = None) -> list[tuple[str, Path]]:
    """(category, file) of every fault file, categories in SKAB's order, files by number."""
    found = [
        (category, path)
        for category in CATEGORIES
        for path in sorted(
            (root / category).glob("*.csv"),
            key=lambda p: (int(p.stem) if p.stem.isdigit() else 10**9, p.name),
        )
    ]
    return found[:limit] if limit is not None else found


def read_skab(path: Path) -> pd.DataFrame:
    """A SKAB file: ``;``-separated, ``datetime``, the sensors, ``anomaly``, ``changepoint``."""
    frame = pd.read_csv(path, sep=";")
    missing = [c for c in (TIME, *LABELS) if c not in frame.columns]
    if missing:
        raise SystemExit(f"{path}: no column {', '.join(missing)} (not a SKAB file?)")
    return frame


def sensors(frame: pd.DataFrame) -> list[str]:
    """Every column but the time, the labels and the detector's flag."""
    return [c for c in frame.columns if c not in (TIME, *LABELS, FLAG)]


def times_ms(frame: pd.DataFrame) -> npt.NDArray[np.int64]:
    """The ``datetime`` column as epoch ms (SKAB's times have no zone; taken as UTC, as file
    mode does)."""
    parsed = pd.to_datetime(frame[TIME], format="ISO8601")
    return parsed.to_numpy(dtype="datetime64[ms]").astype(np.int64)


def detect(
    frame: pd.DataFrame, chunk_rows: int, make: Callable[[], Detector] = default_detector
) -> tuple[npt.NDArray[np.bool_], float, npt.NDArray[np.float64]]:
    """The engine's alert flag of every row (the sensors only, labels kept out), its time, and
    every row's ``anomaly_score``."""
    started = time.perf_counter()
    columns = sensors(frame)
    scored = detect_frame(frame[[TIME, *columns]], TIME, None, columns, chunk_rows, make)
    seconds = time.perf_counter() - started
    if scored["anomaly_score"].isna().any():
        raise SystemExit(f"file mode left {scored['anomaly_score'].isna().sum()} rows unscored")
    scores = scored["anomaly_score"].to_numpy(dtype=np.float64)
    return scored["alert"].to_numpy(dtype=bool), seconds, scores


def score_frame(
    frame: pd.DataFrame,
    scored_from: int = SKAB_TRAIN_ROWS,
    window_ms: int = SKAB_WINDOW_MS,
) -> SkabTally:
    """One file with its labels and an ``alert`` column (0/1 or bool), scored as SKAB does."""
    return score_file(
        times_ms(frame),
        frame["anomaly"].to_numpy(),
        frame["changepoint"].to_numpy(),
        frame[FLAG].to_numpy(),
        scored_from,
        window_ms,
    )


def labels_as_flags(frame: pd.DataFrame, scored_from: int = SKAB_TRAIN_ROWS) -> SkabTally:
    """One file scored with its ``anomaly`` labels as the flags: what alerts that start and end
    with each labelled fault score."""
    return score_frame(frame.assign(**{FLAG: frame["anomaly"].to_numpy() > 0}), scored_from)


def labels_figures(tally: SkabTally) -> dict[str, Any]:
    """The changepoint protocol's figures of :func:`labels_as_flags`."""
    nab = tally.changes_nab
    return {
        "nab_standard_labels": _r(nab.score(STANDARD)),
        "nab_low_fp_labels": _r(nab.score(LOW_FP)),
        "nab_low_fn_labels": _r(nab.score(LOW_FN)),
        "windows_detected_labels": nab.detected,
    }


def _r(value: float, digits: int = 2) -> float | None:
    return None if np.isnan(value) else round(value, digits)


def figures(tally: SkabTally) -> dict[str, Any]:
    c = tally.confusion
    return {
        "outlier_f1": _r(c.f1, 3),
        "far_pct": _r(c.far_pct),
        "mar_pct": _r(c.mar_pct),
        **_false_places(tally),
        "nab_standard": _r(tally.changes_nab.score(STANDARD)),
        "nab_low_fp": _r(tally.changes_nab.score(LOW_FP)),
        "nab_low_fn": _r(tally.changes_nab.score(LOW_FN)),
        "nab_standard_openings": _r(tally.openings.score(STANDARD)),
        "nab_low_fp_openings": _r(tally.openings.score(LOW_FP)),
        "nab_low_fn_openings": _r(tally.openings.score(LOW_FN)),
        "nab_standard_rows": _r(tally.rows_nab.score(STANDARD)),
        "episodes": tally.episodes,
        "anomalies": tally.anomalies,
        "episodes_per_anomaly": _r(tally.episodes / tally.anomalies if tally.anomalies else np.nan),
        "windows": tally.openings.windows,
        "windows_detected": tally.changes_nab.detected,
        "false_openings": tally.openings.false_positives,
        "scored_rows": tally.rows,
        "files": tally.files,
    }


def _false_places(tally: SkabTally) -> dict[str, float | None]:
    """``far_pct`` split by where its rows lie (:mod:`fleetwatch.evaluation.false_rows`)."""
    c, f = tally.confusion, tally.false_rows
    normal = c.fp + c.tn
    return {
        f"far_{place}_pct": _r(100 * n / normal if normal else np.nan)
        for place, n in (("overrun", f.overrun), ("early", f.early), ("apart", f.apart))
    }


Scored = tuple[SkabTally, npt.NDArray[np.bool_], npt.NDArray[np.float64]]
"""One file's tally, and its scored rows' labels and ``anomaly_score``."""

HELD_OUT_FIGURES: dict[str, Callable[[SkabTally], float]] = {
    "outlier_f1": lambda t: t.confusion.f1,
    "far_pct": lambda t: t.confusion.far_pct,
    "mar_pct": lambda t: t.confusion.mar_pct,
    "nab_standard": lambda t: t.changes_nab.score(STANDARD),
}


def _of_pooled(figure: Callable[[SkabTally], float]) -> Callable[[Sequence[Scored]], float]:
    """``figure`` of the files' summed tallies."""
    return lambda picked: figure(sum((t for t, _, _ in picked), SkabTally()))


def held_out(files: list[Scored]) -> dict[str, Any]:
    """The held-out files' figures, each with its 95 % bootstrap interval over files."""
    total = sum((t for t, _, _ in files), SkabTally())
    out = figures(total)

    def ap(picked: Sequence[Scored]) -> float:
        return average_precision(
            np.concatenate([y for _, y, _ in picked]), np.concatenate([s for _, _, s in picked])
        )

    for name, figure in HELD_OUT_FIGURES.items():
        low, high = interval(files, _of_pooled(figure))
        out[f"{name}_ci"] = [_r(low, 3), _r(high, 3)]
    out["score_ap"] = _r(ap(files), 3)
    out["score_ap_ci"] = [_r(v, 3) for v in interval(files, ap)]
    return out


def line(name: str, tally: SkabTally) -> str:
    f = figures(tally)
    return (
        f"{name:<8} {tally.files:>2} files {tally.rows:>6} rows  F1 {f['outlier_f1']}  "
        f"FAR {f['far_pct']} % (overrun {f['far_overrun_pct']}, early {f['far_early_pct']}, "
        f"apart {f['far_apart_pct']})  MAR {f['mar_pct']} %  NAB std/lowFP/lowFN "
        f"{f['nab_standard']} / {f['nab_low_fp']} / {f['nab_low_fn']} "
        f"(openings {f['nab_standard_openings']}, rows {f['nab_standard_rows']})  "
        f"windows {f['windows_detected']}/{f['windows']}  episodes {tally.episodes} "
        f"({f['episodes_per_anomaly']} per anomaly, {f['false_openings']} outside windows)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skab", type=Path, help="SKAB's data/ folder (valve1/, valve2/, other/)")
    parser.add_argument("--limit", type=int, help="only the first N files (a quick run)")
    parser.add_argument("--train-rows", type=int, default=SKAB_TRAIN_ROWS)
    parser.add_argument("--chunk-rows", type=int, default=DEFAULT_CHUNK_ROWS)
    parser.add_argument("--detectors", help="comma-separated detector kinds to combine")
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="all",
        help="tuning: valve1/ only (what may be tuned on); held-out: valve2/ and other/; all",
    )
    parser.add_argument(
        "--device-calibration", action="store_true", help="score.device_calibration on"
    )
    args = parser.parse_args()
    make = detector_factory(args.detectors, Tuning(device_calibration=args.device_calibration))
    files = skab_files(args.skab, args.limit) if args.skab and args.skab.is_dir() else []
    files = [(c, p) for c, p in files if c in SPLITS[args.split]]
    if not files:
        print(WHERE)
        return
    load_start = os.getloadavg()[0]
    began = time.perf_counter()
    per_category: dict[str, SkabTally] = {}
    whole = SkabTally()
    as_labelled = SkabTally()
    rows = 0
    engine_s = 0.0
    ranked: list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]] = []
    held: list[Scored] = []
    for category, path in files:
        frame = read_skab(path)
        frame[FLAG], seconds, scores = detect(frame, args.chunk_rows, make)
        labelled = frame["anomaly"].to_numpy() > 0
        ranked.append((labelled[args.train_rows :], scores[args.train_rows :]))
        engine_s += seconds
        rows += len(frame)
        tally = score_frame(frame, args.train_rows)
        whole += score_frame(frame, 0)
        as_labelled += labels_as_flags(frame, args.train_rows)
        per_category[category] = per_category.get(category, SkabTally()) + tally
        if category not in TUNING:
            held.append((tally, *ranked[-1]))
        print(line(f"{category}/{path.stem}", tally), file=sys.stderr)
    overall = sum(per_category.values(), SkabTally())
    print(f"scored from row {args.train_rows} of each file (SKAB's split); chunk {args.chunk_rows}")
    for category, tally in per_category.items():
        print(line(category, tally))
    print(line("overall", overall))
    print(line("whole", whole) + "  (every row scored)")
    reference = labels_figures(as_labelled)
    print(
        f"the labels as flags: NAB std/lowFP/lowFN {reference['nab_standard_labels']} / "
        f"{reference['nab_low_fp_labels']} / {reference['nab_low_fn_labels']}  windows "
        f"{reference['windows_detected_labels']}/{as_labelled.changes_nab.windows}"
    )
    labels = np.concatenate([r[0] for r in ranked])
    scores_all = np.concatenate([r[1] for r in ranked])
    ranking = {
        "score_ap": _r(average_precision(labels, scores_all), 3),
        "score_ap_random": _r(float(labels.mean()), 3),
        "score_saturated_pct": _r(100.0 * saturated_share(scores_all), 2),
    }
    print(
        f"anomaly_score ranking: average precision {ranking['score_ap']} (random order "
        f"{ranking['score_ap_random']}), rows scoring >= 0.999: {ranking['score_saturated_pct']} %"
    )
    held_figures = held_out(held) if held else {}
    if held:
        print(
            f"held out ({', '.join(c for c in CATEGORIES if c not in TUNING)}, {len(held)} "
            f"files): F1 {held_figures['outlier_f1']} {held_figures['outlier_f1_ci']}  FAR "
            f"{held_figures['far_pct']} {held_figures['far_pct_ci']} %  MAR "
            f"{held_figures['mar_pct']} {held_figures['mar_pct_ci']} %  NAB std "
            f"{held_figures['nab_standard']} {held_figures['nab_standard_ci']}  score AP "
            f"{held_figures['score_ap']} {held_figures['score_ap_ci']}  (95 % bootstrap "
            "intervals over files)"
        )
    result = {
        **figures(overall),
        "held_out": held_figures,
        **ranking,
        **reference,
        "rows": rows,
        "rows_per_s": round(rows / engine_s) if engine_s else None,
        "seconds": round(time.perf_counter() - began, 2),
        "train_rows": args.train_rows,
        "chunk_rows": args.chunk_rows,
        "detectors": args.detectors or "default",
        "split": args.split,
        "device_calibration": args.device_calibration,
        "loadavg_1m": round(load_start, 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
        "categories": {category: figures(tally) for category, tally in per_category.items()},
        "whole_file": figures(whole),
    }
    print(json.dumps(result))
    write_results(__file__, result)


if __name__ == "__main__":
    main()
