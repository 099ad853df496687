#!/usr/bin/python3
"""Plots //bench:chain's JSON: one row of panels per scenario and load.

Left, goodput at the generator (successful requests a second; in the
two-method scenario, the independent method's too, dotted); right, attempts
at the store C a second; one line per client, the fault window shaded, the
offered load dashed. Several JSON files (e.g. a quiet and a loaded run) make
one figure, their rows in order. Runs with Debian's python3 and its
python3-matplotlib (no virtualenv): /usr/bin/python3 bench/plot_chain.py
bench/chain_results.json [more.json ...] bench/chain.png
"""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display on a benchmark machine
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)


def row_name(cell):
    load = cell.get("load", 0)
    if not load:
        return cell["scenario"]
    return "%s\n%d busy loop%s" % (cell["scenario"], load, "" if load == 1 else "s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", help="outputs of chain --json=PATH")
    parser.add_argument("png", help="the PNG to write")
    parser.add_argument(
        "--resolution",
        choices=["1s", "100ms"],
        default="1s",
        help="series to plot (100ms: scaled to a rate a second)",
    )
    args = parser.parse_args()

    reports = []
    cells = []
    for path in args.json:
        with open(path) as f:
            report = json.load(f)
        reports.append(report)
        for cell in report["cells"]:
            # Older files have one duration for every cell.
            cell.setdefault("duration_s", report["duration_s"])
            cells.append(cell)
    if not cells:
        sys.exit("plot_chain: no cells in " + ", ".join(args.json))
    rows = list(dict.fromkeys(row_name(c) for c in cells))
    clients = list(dict.fromkeys(c["client"] for c in cells))
    colors = {
        client: plt.get_cmap("tab10")(i % 10) for i, client in enumerate(clients)
    }
    key = "series" if args.resolution == "1s" else "series_100ms"
    # A 100-ms bucket holds a tenth of a second's calls.
    scale = 1 if args.resolution == "1s" else 10

    fig, axes = plt.subplots(
        len(rows), 2, figsize=(13, 3.0 * len(rows)), squeeze=False
    )
    for row, name in enumerate(rows):
        good_ax, c_ax = axes[row]
        row_cells = [c for c in cells if row_name(c) == name]
        for cell in row_cells:
            series = cell[key]
            # A 1-s point is the second that starts at t; draw it mid-second.
            offset = 0.5 if args.resolution == "1s" else 0.05
            # Only the run itself: after it, the buckets are empty.
            keep = [i for i, x in enumerate(series["t_s"])
                    if x < cell["duration_s"]]
            t = [series["t_s"][i] + offset for i in keep]
            style = dict(color=colors[cell["client"]], label=cell["client"], lw=1.4)
            # The client under test stands out; its baseline is dashed.
            if cell["client"] == "rpcguard_fleet":
                style.update(color="black", lw=2.4)
            elif cell["client"] == "single_tier":
                style.update(ls="--", lw=1.8)
            good_ax.plot(t, [series["ok"][i] * scale for i in keep], **style)
            c_ax.plot(t, [series["attempts_c"][i] * scale for i in keep], **style)
            if "independent_ok" in series:
                good_ax.plot(t, [series["independent_ok"][i] * scale for i in keep],
                             color=style["color"], lw=1.0, ls=":")
        first = row_cells[0]
        duration = max(c["duration_s"] for c in row_cells)
        for ax in (good_ax, c_ax):
            ax.axvspan(first["fault_start_s"], first["fault_end_s"],
                       color="red", alpha=0.08, label="fault")
            ax.axhline(first["offered_per_s"], color="gray", ls="--", lw=0.8)
            ax.set_xlim(0, duration)
            ax.grid(alpha=0.3)
        label = name + "\ngoodput (ok/s)"
        if any("independent_ok" in c[key] for c in row_cells):
            label += "\n(dotted: Put)"
        good_ax.set_ylabel(label)
        c_ax.set_ylabel("attempts at C /s")
        # Linear up to the offered load, logarithmic above: one attempt a
        # request and 27 both stay readable.
        c_ax.set_yscale("symlog", linthresh=first["offered_per_s"])
        c_ax.set_ylim(bottom=0)
        if row == len(rows) - 1:
            good_ax.set_xlabel("seconds")
            c_ax.set_xlabel("seconds")
    # Every client's line, from whichever row has it.
    handles, labels = [], []
    for ax in axes[:, 0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    first = reports[0]
    fig.suptitle(
        "generator -> A -> B -> C, %g req/s, %d attempts a hop, median of %s run(s)"
        % (first["rate_per_s"], first["max_attempts_per_hop"],
           "/".join(sorted({str(r["runs"]) for r in reports}))),
        y=0.998,
    )
    # Below the title, above the panels.
    top = 1 - 0.75 / fig.get_figheight()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels),
               frameon=False, bbox_to_anchor=(0.5, top + 0.4 / fig.get_figheight()))
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(args.png, dpi=100)


if __name__ == "__main__":
    main()
