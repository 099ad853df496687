#!/usr/bin/python3
"""Plots //bench:chain's JSON: one row of panels per scenario.

Left, goodput at the generator (successful requests a second); right,
attempts at the store C a second; one line per client, the fault window
shaded, the offered load dashed. Runs with Debian's python3 and its
python3-matplotlib (no virtualenv): /usr/bin/python3 bench/plot_chain.py
bench/chain_results.json bench/chain.png
"""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display on a benchmark machine
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="the output of chain --json=PATH")
    parser.add_argument("png", help="the PNG to write")
    parser.add_argument(
        "--resolution",
        choices=["1s", "100ms"],
        default="1s",
        help="series to plot (100ms: scaled to a rate a second)",
    )
    args = parser.parse_args()

    with open(args.json) as f:
        report = json.load(f)
    cells = report["cells"]
    if not cells:
        sys.exit("plot_chain: no cells in " + args.json)
    scenarios = list(dict.fromkeys(c["scenario"] for c in cells))
    clients = list(dict.fromkeys(c["client"] for c in cells))
    colors = {
        client: plt.get_cmap("tab10")(i % 10) for i, client in enumerate(clients)
    }
    key = "series" if args.resolution == "1s" else "series_100ms"
    # A 100-ms bucket holds a tenth of a second's calls.
    scale = 1 if args.resolution == "1s" else 10

    fig, axes = plt.subplots(
        len(scenarios), 2, figsize=(13, 3.2 * len(scenarios)), squeeze=False
    )
    for row, scenario in enumerate(scenarios):
        good_ax, c_ax = axes[row]
        for cell in (c for c in cells if c["scenario"] == scenario):
            series = cell[key]
            # A 1-s point is the second that starts at t; draw it mid-second.
            offset = 0.5 if args.resolution == "1s" else 0.05
            # Only the run itself: after it, the buckets are empty.
            keep = [i for i, x in enumerate(series["t_s"])
                    if x < report["duration_s"]]
            t = [series["t_s"][i] + offset for i in keep]
            style = dict(color=colors[cell["client"]], label=cell["client"], lw=1.4)
            # The client under test stands out; its baseline is dashed.
            if cell["client"] == "rpcguard_fleet":
                style.update(color="black", lw=2.4)
            elif cell["client"] == "single_tier":
                style.update(ls="--", lw=1.8)
            good_ax.plot(t, [series["ok"][i] * scale for i in keep], **style)
            c_ax.plot(t, [series["attempts_c"][i] * scale for i in keep], **style)
        first = next(c for c in cells if c["scenario"] == scenario)
        for ax in (good_ax, c_ax):
            ax.axvspan(first["fault_start_s"], first["fault_end_s"],
                       color="red", alpha=0.08, label="fault")
            ax.axhline(first["offered_per_s"], color="gray", ls="--", lw=0.8)
            ax.set_xlim(0, report["duration_s"])
            ax.grid(alpha=0.3)
        good_ax.set_ylabel(scenario + "\ngoodput (ok/s)")
        c_ax.set_ylabel("attempts at C /s")
        # Linear up to the offered load, logarithmic above: one attempt a
        # request and 27 both stay readable.
        c_ax.set_yscale("symlog", linthresh=first["offered_per_s"])
        c_ax.set_ylim(bottom=0)
        if row == len(scenarios) - 1:
            good_ax.set_xlabel("seconds")
            c_ax.set_xlabel("seconds")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.suptitle(
        "generator -> A -> B -> C, %g req/s, %d attempts a hop, median of %d run(s)"
        % (report["rate_per_s"], report["max_attempts_per_hop"], report["runs"]),
        y=0.998,
    )
    # Below the title, above the panels.
    top = 1 - 0.75 / fig.get_figheight()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels),
               frameon=False, bbox_to_anchor=(0.5, top + 0.4 / fig.get_figheight()))
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
