#!/usr/bin/python3
"""Checks //bench:chain's JSON against issue 46's "done when" criteria.

Reads one or more outputs of `chain --json=PATH` (e.g. a quiet and a loaded
run) and prints a markdown table, one row per check and scenario/load:

- overload (overload2x, overload4x, their _cold forms, sustained2x), at
  every load: rpcguard_fleet's success at least no retries' ("none") within
  2 points (medians), no fleet run below 90% of none's median, and attempts
  at the store per request over the fault at most grpc_throttled's;
- fail60 on a loaded machine (load > 0): rpcguard_fleet's success at least
  single_tier's (medians);
- split: the independent method (Put) at 100% in every fleet run, and no
  breaker opening at the generator or at A (the clients whose destination is
  a middle) in any fleet run;
- outage and split (the store down): at most 3 attempts at the store for any
  one request, in every fleet run.

A check whose clients are missing from the files is left out. Standard
library only: /usr/bin/python3 bench/chain_checks.py bench/chain_results.json
[bench/chain_results_loaded.json]
"""

import argparse
import json

OVERLOAD = ["overload2x", "overload4x", "overload2x_cold", "overload4x_cold",
            "sustained2x"]


def pct(x):
    return "%.1f%%" % (100 * x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", help="outputs of chain --json=PATH")
    args = parser.parse_args()

    cells = {}
    for path in args.json:
        with open(path) as f:
            for cell in json.load(f)["cells"]:
                key = (cell["scenario"], cell.get("load", 0), cell["client"])
                cells[key] = cell
    levels = sorted({(s, l) for s, l, _ in cells},
                    key=lambda sl: (sl[1], sl[0]))

    def where(scenario, load):
        return scenario + (", %d loops" % load if load else "")

    rows = []
    for scenario, load in levels:
        fleet = cells.get((scenario, load, "rpcguard_fleet"))
        if fleet is None:
            continue
        runs = fleet["per_run"]
        none = cells.get((scenario, load, "none"))
        throttled = cells.get((scenario, load, "grpc_throttled"))
        single = cells.get((scenario, load, "single_tier"))
        if scenario in OVERLOAD and none is not None:
            diff = fleet["success_ratio"] - none["success_ratio"]
            lowest = min(r["success_ratio"] for r in runs)
            floor = 0.9 * none["success_ratio"]
            rows.append((
                "goodput at least no retries' (2 points; every run 90%)",
                where(scenario, load),
                "%s vs %s (%+.1f points); lowest run %s (90%%: %s)" % (
                    pct(fleet["success_ratio"]), pct(none["success_ratio"]),
                    100 * diff, pct(lowest), pct(floor)),
                diff >= -0.02 and lowest >= floor))
        if scenario in OVERLOAD and throttled is not None:
            mine = fleet["attempts_c_per_request_fault"]
            theirs = throttled["attempts_c_per_request_fault"]
            rows.append((
                "attempts at the store at most grpc_throttled's",
                where(scenario, load),
                "%.2f vs %.2f a request over the fault" % (mine, theirs),
                mine <= theirs))
        if scenario == "fail60" and load > 0 and single is not None:
            rows.append((
                "success at least a single tier's (loaded)",
                where(scenario, load),
                "%s vs %s" % (pct(fleet["success_ratio"]),
                              pct(single["success_ratio"])),
                fleet["success_ratio"] >= single["success_ratio"]))
        if scenario == "split":
            lowest = min(r["independent_success_ratio"] for r in runs)
            rows.append((
                "the independent method keeps 100%",
                where(scenario, load),
                "lowest run %s (median %s)" % (
                    pct(lowest), pct(fleet["independent_success_ratio"])),
                lowest >= 1.0))
            gen = max(r["breaker_openings_generator"] for r in runs)
            a = max(r["breaker_openings_a"] for r in runs)
            b = max(r["breaker_openings_b"] for r in runs)
            rows.append((
                "no breaker opens on a middle (generator's on A, A's on B)",
                where(scenario, load),
                "most in any run: generator %d, A %d (B's on the store: %d)"
                % (gen, a, b),
                gen == 0 and a == 0))
        if scenario in ("outage", "split"):
            most = max(r["attempts_c_max_per_request"] for r in runs)
            rows.append((
                "store down: at most 3 attempts for any one request",
                where(scenario, load),
                "%d in the worst run" % most,
                most <= 3))

    print("| check | scenario | figure (rpcguard_fleet vs the baseline) | met |")
    print("|---|---|---|---|")
    for check, scenario, figure, met in rows:
        print("| %s | %s | %s | %s |" % (check, scenario, figure,
                                         "yes" if met else "**no**"))


if __name__ == "__main__":
    main()
