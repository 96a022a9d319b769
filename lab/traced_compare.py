#!/usr/bin/env python3
"""The traced estimate against the real step, per case of lab/traced.sh or lab/traced-gpu.sh:
headroom-cli estimate --from-trace NAME.trace-tl.json against NAME.real.json's steady peaks (the
highest of the steps after the warm-up). Prints the table and the summary the issue asks for.
Then the modelled rows (families by difference) against the same real steps, where the type has
one: headroom-cli compare --json NAME.real.json, the phases' peaks."""
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
    summary("traced", rows)
    modelled = []
    for real in sorted(glob.glob(os.path.join(folder, "*.real.json"))):
        name = os.path.basename(real)[: -len(".real.json")]
        p = subprocess.run([cli, "compare", "--json", real], capture_output=True, text=True)
        if p.returncode not in (0, 1):  # 2: no row for the type (traced only) or a bad file
            print(f"{name:28s} no modelled row: {p.stderr.strip()[:120]}")
            continue
        phases = [q for q in json.loads(p.stdout)["phases"] if q["phase"] != "after_load"]
        worst = max(phases, key=lambda q: q["measured_bytes"])
        a = 100 * worst["error"]
        modelled.append((name, a, None))
        print(f"{name:28s} modelled: peak phase {worst['phase']} {a:+7.3f}%, every phase within "
              f"{100 * max(abs(q['error']) for q in phases):.3f}%")
    summary("modelled (allocated, the measured peak phase)", modelled)


def summary(what, rows):
    if not rows:
        return
    al = [abs(x[1]) for x in rows]
    line = (f"{what}: {len(rows)} cases: allocated median |error| {statistics.median(al):.3f}%, max {max(al):.3f}%, "
            f"most under {min(x[1] for x in rows):+.3f}%")
    re = [abs(x[2]) for x in rows if x[2] is not None]
    if re:
        line += f"; reserved median {statistics.median(re):.3f}%, max {max(re):.3f}%"
    print(line)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "build-gpu/app/headroom-cli")
