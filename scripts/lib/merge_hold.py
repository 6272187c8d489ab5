"""Merges the `hold` step of scripts/studies/nvme.sh into nvme.json: block
reads with the doorbell hold (HOLD json) and without it (NOHOLD json), runs
named hold.<controller>.t<threads>.r<run>; one row a controller and thread
count, queues.ring_hold.<controller>.t<threads>: value the best IOPS with
the hold, ceiling the best without, every run in params. Usage:
merge_hold.py HOLD NOHOLD RESULTS COMMIT"""
import collections
import datetime
import json
import sys


def runs(path):
    out = collections.defaultdict(list)
    for r in json.load(open(path))["results"]:
        if not r["name"].endswith(".iops"):
            continue
        base = r["name"][: -len(".iops")].rsplit(".r", 1)[0]  # hold.<c>.t<threads>
        out[base].append(r)
    return out


def main():
    hold, nohold, results, commit = sys.argv[1:5]
    a, b = runs(hold), runs(nohold)
    doc = json.load(open(results))
    rows = []
    for key in sorted(a):
        if key not in b:
            continue
        _, controller, threads = key.split(".", 2)
        best_a = max(r["value"] for r in a[key])
        best_b = max(r["value"] for r in b[key])
        mism = sum(r["mismatches"] for r in a[key] + b[key])
        rows.append({
            "name": f"queues.ring_hold.{controller}.{threads}",
            "value": best_a,
            "unit": "IOPS",
            "ceiling": best_b,
            "ceiling_name": "the same reads built with WARPSTORE_RING_HOLD_NS=0 (no hold), same run",
            "ratio": round(best_a / best_b, 4) if best_b else None,
            "verified": all(r["verified"] for r in a[key] + b[key]),
            "mismatches": mism,
            "params": {
                "controller": controller,
                "threads": threads[1:],
                "requests_per_thread": 8,
                "request": 4096,
                "iops_each_run_hold": [r["value"] for r in a[key]],
                "iops_each_run_no_hold": [r["value"] for r in b[key]],
                "commit": commit,
            },
        })
        print(f"{rows[-1]['name']}: {best_a:.0f} vs {best_b:.0f} IOPS, ratio {rows[-1]['ratio']}")
    names = {r["name"] for r in rows}
    doc["results"] = [r for r in doc["results"] if r["name"] not in names] + rows
    doc["date"] = datetime.date.today().isoformat()
    json.dump(doc, open(results, "w"), indent=1)
    open(results, "a").write("\n")


if __name__ == "__main__":
    main()
