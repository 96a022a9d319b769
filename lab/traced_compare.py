#!/usr/bin/env python3
"""The traced estimate against the real step, per case of lab/traced.sh or lab/traced-gpu.sh:
headroom-cli estimate --from-trace NAME.trace-tl.json against NAME.real.json's steady peaks (the
highest of the steps after the warm-up). Prints the table and the summary the issue asks for."""
import glob, json, os, statistics, subprocess, sys


def main(folder, cli):
    rows = []
    for tl in sorted(glob.glob(os.path.join(folder, "*.trace-tl.json"))):
        name = os.path.basename(tl)[: -len(".trace-tl.json")]
        real = os.path.join(folder, name + ".real.json")
        if not os.path.exists(real):
            continue
        p = subprocess.run([cli, "estimate", "--from-trace", tl, "--gpu", "h200", "--json"], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{name:28s} estimate failed: {p.stderr.strip()[:200]}")
            continue
        est = json.loads(p.stdout)["peak"]
        m = json.load(open(real))
        steady = [q for q in m["phases"] if q["step"] >= m.get("warmup_steps", 1)]
        if not steady:
            continue
        ra = max(q["peak_allocated_bytes"] for q in steady)
        rr = max(q["peak_reserved_bytes"] for q in steady)
        a, r = 100 * (est["allocated_bytes"] - ra) / ra, 100 * (est["reserved_bytes"] - rr) / rr
        rows.append((name, a, r))
        print(f"{name:28s} allocated {a:+7.3f}%  reserved {r:+7.3f}%")
    if rows:
        al, re = [abs(x[1]) for x in rows], [abs(x[2]) for x in rows]
        print(f"{len(rows)} cases: allocated median |error| {statistics.median(al):.3f}%, max {max(al):.3f}%, "
              f"most under {min(x[1] for x in rows):+.3f}%; reserved median {statistics.median(re):.3f}%, max {max(re):.3f}%")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "build-gpu/app/headroom-cli")
