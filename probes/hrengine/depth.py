"""Note [Traced depth]: a deep model's trace from three shallow ones.

A decoder stack repeats: from some layer f on, layer i is built like layer i + P (the same
modules, shapes and settings). Its step repeats the same way: each phase's stream at depth k + P
is the stream at depth k with one period's events inserted at fixed places (in forward one period
of layers, in backward one period of layer gradients, in the optimizer one period of parameters
in each list op). So the trace at the full depth L is made from traces at k, k + P and k + 2P:

- the layers of the full model (built on the meta device: nothing allocated) give f and P, and
  each shallow model's layers must be the full model's first k;
- k + 2P against k gives the places and the inserted events, two copies of one block at each
  place (their sizes and frames equal, or no extrapolation);
- each free in copy c of a block frees an allocation of copy c + d of a block, d in -1, 0, 1 (a
  layer frees its predecessor's output), or of copy n - 1 - c + d (a backward layer frees its
  forward twin's activations, the copies counted from the other end); out of the copies' range,
  one of the common part. Which, is read off the two copies. A free in the common part of a
  block's allocation frees the first or the last copy's;
- the stream at k + P is predicted from those rules with one copy and must equal the traced one,
  event for event and free for free, or the full depth is traced instead.

The full-depth stream then has (L - k) / P copies of each block. Phase marks are placed by where
they fall at k + P. Parameter counts grow by the same difference. A 32-layer Llama would be traced
as 1, 2 and 3 layers.

Status: opt-in (`--trace-by-depth`), not the default. On the CPU tiny model (tst_engine
traceByDepthIsTheFullTrace) the extrapolated timeline is the full trace's, event for event, at 5,
8 and 12 layers, with accumulation and bf16. On the H200 stack (lab/depth.py, 2026-12-04) six
types extrapolated but did not equal their full traces, and neither did two full traces of one
request in two processes (a one-time initialisation the first model build makes: 8 ops): the
comparison must first be made reproducible. LoRA and checkpointing then fell back to full depth
(the layer check saw PEFT's wrappers; normalised since). On the 8B-shaped plain-torch model at
32 layers (bench/trace.sh, 2026-12-08) the extrapolation misses one event of 21,706: a 4-byte free
in the first optimizer step (a 4-byte block kept: an over-estimate of 4 bytes): the test model's
0-dim scalar of `10000 ** (...)`, let go at an op the layers' repeats do not predict (not the cycle
collector: the same with it off); on CUDA that scalar stays on the CPU.
"""
import difflib

from .build import build_base, find_layers
from .protocol import short


class NotPeriodic(Exception):
    """The shallow traces do not extrapolate (the reason says where); the full depth is traced."""


_INDEX_KEYS = ("layer_idx", "layer_id", "layer_number", "layer_index", "idx", "block_idx")


def layer_signature(torch, layer):
    """What a layer is built from: each submodule's class, its scalar settings (not its index)
    and each parameter's shape and dtype."""
    sig = []
    for name, mod in layer.named_modules():
        # PEFT's wrappers and adapters, and the checkpointing switch, are laid on every layer
        # alike: the base layer is what is compared (the traced models have them, the meta one not)
        parts = name.split(".") if name else []
        if any(p.startswith("lora_") for p in parts) or hasattr(mod, "base_layer"):
            continue
        name = ".".join(p for p in parts if p != "base_layer")
        attrs = []
        for k, v in sorted(vars(mod).items()):
            if k.startswith("_") or k in _INDEX_KEYS or k in ("training", "gradient_checkpointing"):
                continue
            if isinstance(v, (bool, int, float, str)) or v is None:
                attrs.append((k, v))
            elif isinstance(v, (tuple, list)) and all(isinstance(x, (bool, int, float, str)) for x in v) and len(v) < 64:
                attrs.append((k, tuple(v)))
        params = tuple((n, tuple(p.shape), str(p.dtype)) for n, p in mod.named_parameters(recurse=False))
        sig.append((name, type(mod).__name__, tuple(attrs), params))
    return tuple(sig)


def period_of(sigs, min_copies=3):
    """(f, P): the smallest start and period from which the layers repeat, with room for at least
    min_copies periods after f; None when there is none."""
    L = len(sigs)
    best = None
    for P in range(1, L // min_copies + 1):
        f = L - P
        while f > 0 and sigs[f - 1] == sigs[f - 1 + P]:
            f -= 1
        if L - f < min_copies * P:
            continue
        cost = f + 3 * P
        if best is None or cost < best[0]:
            best = (cost, f, P)
    return None if best is None else (best[1], best[2])


def cut_config(hf, k, L):
    """The config at depth k: num_hidden_layers, and every per-layer list or pattern cut to its
    first k (layer_types, a hybrid pattern string, index-keyed dicts)."""
    out = dict(hf)
    out["num_hidden_layers"] = k
    for key, v in hf.items():
        if key == "model_type":
            continue
        if isinstance(v, (list, str)) and len(v) == L and L > 1:
            out[key] = v[:k]
        elif isinstance(v, dict) and v and all(str(i).isdigit() for i in v):
            out[key] = {i: x for i, x in v.items() if int(i) < k}
    return out


FIRST_ADDRESS = 1 << 20  # the trace's first block


def address_step(size):
    """How far the trace's next address moves past a block of `size` bytes (fake.AllocTrace and
    the extrapolated stream alike, so that the two give the same addresses)."""
    return max(512, (int(size) + 511) // 512 * 512)


def _tokens(entries):
    return [(e["action"], int(e["size"]), _frame(e)) for e in entries]


def _frame(e):
    fr = e.get("frames") or []
    if not fr:
        return ""
    f = fr[0]
    return f"{f.get('filename', '')}:{f.get('line', 0)}"


def _labels(entries, base_len, inserts):
    """For a stream that is the base with blocks inserted: each entry's label, ("C", base index)
    or ("B", block, copy, position), given inserts = [(base position, block length, copies)]."""
    labels = []
    bi = 0
    for j, (pos, blen, copies) in enumerate(inserts):
        while bi < pos:
            labels.append(("C", bi))
            bi += 1
        for c in range(copies):
            for t in range(blen):
                labels.append(("B", j, c, t))
    while bi < base_len:
        labels.append(("C", bi))
        bi += 1
    if len(labels) != len(entries):
        raise NotPeriodic("the blocks do not tile the stream")
    return labels


def _inserts(base, longer, copies):
    """Where `longer` is `base` with `copies` equal copies of a block inserted at each place."""
    sm = difflib.SequenceMatcher(None, base, longer, autojunk=False)
    ins = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        if op != "insert":
            raise NotPeriodic(f"the deeper stream is not the shallower one with events inserted ({op} at {i1})")
        n = j2 - j1
        if n % copies:
            raise NotPeriodic(f"an inserted run of {n} events is not {copies} copies")
        blen = n // copies
        block = longer[j1:j1 + blen]
        for c in range(1, copies):
            if longer[j1 + c * blen:j1 + (c + 1) * blen] != block:
                raise NotPeriodic(f"the copies inserted at {i1} differ")
        ins.append((i1, blen, copies, j1))
    return ins


def _slide(base, longer, ins, marks):
    """An insert inside a repeating run can sit one period to the left or the right with the same
    events; the rules need the copies where the layers are: a forward block at the first repeated
    layers (leftmost), a backward block, whose layers come last first, at the last place
    (rightmost), so that backward copy c meets forward copy n - 1 - c. Never across a mark."""
    bounds = sorted({idx for _, idx, _ in marks})
    phase_at = []  # (base index where a phase begins, its phase)
    for label, idx, _ in sorted(marks, key=lambda m: m[1]):
        phase_at.append((idx, label.get("phase")))

    def phase(p):
        ph = None
        for idx, name in phase_at:
            if idx <= p:
                ph = name
        return ph

    def lo_bound(p):
        return max([b for b in bounds if b <= p], default=0)

    def hi_bound(p):
        return min([b for b in bounds if b >= p], default=len(base))

    ins = [list(x) for x in ins]  # [base pos, block length, copies, start in longer]
    # shifting one insert moves the later ones' starts in `longer` by nothing (each has its own)
    for x in ins:
        n = x[1] * x[2]
        if phase(x[0]) == "backward":
            while x[0] < hi_bound(x[0]) and x[3] + n < len(longer) and longer[x[3] + n] == longer[x[3]]:
                x[0] += 1
                x[3] += 1
        else:
            while x[0] > lo_bound(x[0]) and x[3] > 0 and longer[x[3] - 1] == longer[x[3] + n - 1]:
                x[0] -= 1
                x[3] -= 1
    for a, b in zip(ins, ins[1:]):
        if a[0] > b[0] or a[3] + a[1] * a[2] > b[3]:
            raise NotPeriodic("two repeated blocks meet")
    return [tuple(x) for x in ins]


def _targets(entries, labels):
    """For each free, the label of the allocation it frees (None: made before the trace)."""
    made = {}
    out = []
    for e, lab in zip(entries, labels):
        if e["action"] == "alloc":
            made[e["addr"]] = lab
            out.append(None)
        else:
            out.append(made.get(e["addr"]))
    return out


def _rule(key, t0, t1):
    """Which allocation copy c of a block frees, from what copies 0 and 1 free: copy a*c + d of
    block j' (a = -1 counts from the last copy: a backward layer frees its forward twin), or, out
    of the copies' range, the common allocation seen there: (a, d, j', t', common index)."""
    blocks = {t[1] for t in (t0, t1) if t[0] == "B"} | set()
    poss = {t[3] for t in (t0, t1) if t[0] == "B"}
    if len(blocks) != 1 or len(poss) != 1:
        raise NotPeriodic(f"a free in block {key[0]} follows no rule ({t0}, {t1})")
    j2, t2 = blocks.pop(), poss.pop()
    c0 = t0[2] if t0[0] == "B" else None
    c1 = t1[2] if t1[0] == "B" else None
    common = t0[1] if t0[0] == "C" else (t1[1] if t1[0] == "C" else None)
    table = {(0, 1): (1, 0), (None, 0): (1, -1), (1, None): (1, 1),
             (1, 0): (-1, 0), (0, None): (-1, -1), (None, 1): (-1, 1)}
    ad = table.get((c0, c1))
    if ad is None:
        raise NotPeriodic(f"a free in block {key[0]} follows no rule ({t0}, {t1})")
    return (ad[0], ad[1], j2, t2, common)


def learn(run1, run3):
    """The rules of Note [Traced depth] from the traces at k (run1) and k + 2P (run3)."""
    e1, e3 = run1["entries"], run3["entries"]
    t1, t3 = _tokens(e1), _tokens(e3)
    ins = _inserts(t1, t3, 2)
    if not ins:
        raise NotPeriodic("nothing repeats between the two depths")
    ins = _slide(t1, t3, ins, run1["marks"])
    for pos, blen, _, j1 in ins:
        if t3[j1:j1 + blen] != t3[j1 + blen:j1 + 2 * blen]:
            raise NotPeriodic("the two copies of a block differ")
    inserts = [(pos, blen, 2) for pos, blen, _, _ in ins]
    labels = _labels(e3, len(e1), inserts)
    tgt = _targets(e3, labels)
    block_free = {}   # (j, t) -> [target of copy 0, target of copy 1]
    common_rule = {}  # common index of a free -> ("C", i) | ("first" | "last", j, t) | None
    for lab, e, t in zip(labels, e3, tgt):
        if e["action"] != "free_completed":
            continue
        if lab[0] == "C":
            if t is None or t[0] == "C":
                common_rule[lab[1]] = t
            else:
                common_rule[lab[1]] = ("first" if t[2] == 0 else "last", t[1], t[3])
            continue
        _, j, c, pos = lab
        block_free.setdefault((j, pos), [None, None])[c] = t
    rules = {}
    for key, (t0, t1) in block_free.items():
        if t0 is None or t1 is None:
            raise NotPeriodic("a free in a block frees what the trace did not make")
        rules[key] = _rule(key, t0, t1)
    addr3 = {lab: e["addr"] for lab, e in zip(labels, e3) if e["action"] == "alloc"}
    common = [e for e, lab in zip(e3, labels) if lab[0] == "C"]
    blocks = [(pos, e3[j1:j1 + blen]) for pos, blen, _, j1 in ins]
    return {"common": common, "blocks": blocks, "rules": rules, "common_rule": common_rule, "addr3": addr3}


def build(model, n):
    """The stream with n >= 1 copies of each block, with fresh addresses; and per output entry its
    origin, ("C", i) or ("B", j, c, t)."""
    common, blocks, rules, crule = model["common"], model["blocks"], model["rules"], model["common_rule"]
    out, origin = [], []
    next_addr = [FIRST_ADDRESS]
    addr = {}  # origin label -> new address of that allocation

    def fresh(size):
        a = next_addr[0]
        next_addr[0] += address_step(size)
        return a

    def emit_common(i):
        e = common[i]
        if e["action"] == "alloc":
            a = addr[("C", i)] = fresh(e["size"])
        else:
            r = crule.get(i)
            if r is None:  # made before the trace: an address nothing else uses
                a = fresh(e["size"])
            elif r[0] == "C":
                a = addr[r]
            else:
                a = addr[("B", r[1], 0 if r[0] == "first" else n - 1, r[2])]
        out.append(dict(e, addr=a, time_us=len(out)))
        origin.append(("C", i))

    bi = 0
    for j, (pos, block) in enumerate(blocks):
        while bi < pos:
            emit_common(bi)
            bi += 1
        for c in range(n):
            for t, e in enumerate(block):
                if e["action"] == "alloc":
                    a = addr[("B", j, c, t)] = fresh(e["size"])
                else:
                    sign, d, j2, t2, common_ix = rules[(j, t)]
                    c2 = c + d if sign == 1 else n - 1 - c + d
                    a = addr[("B", j2, c2, t2)] if 0 <= c2 < n else addr[("C", common_ix)]
                out.append(dict(e, addr=a, time_us=len(out)))
                origin.append(("B", j, c, t))
    while bi < len(common):
        emit_common(bi)
        bi += 1
    return out, origin


def run3_addr(model, o):
    """The address in the k + 2P trace of the allocation an output entry's origin copies (a
    block's copies take copy 0's): to carry its category (weights, gradients, state) over."""
    if o[0] == "C":
        return model["addr3"].get(o)
    return model["addr3"].get(("B", o[1], 0, o[3]))


def same_stream(a, b):
    """Two streams alike: the same events in order, each free freeing the same event's block."""
    if _tokens(a) != _tokens(b):
        return False

    def shape(entries):
        born, out = {}, []
        for x, e in enumerate(entries):
            if e["action"] == "alloc":
                born[e["addr"]] = x
                out.append(-1)
            else:
                out.append(born.get(e["addr"], -2))
        return out
    return shape(a) == shape(b)


def map_marks(run2, model, origin):
    """Marks at the full depth: each at the place it holds at k + P, before or after a block's
    copies as it is before or after the block there."""
    e2 = run2["entries"]
    inserts = [(pos, len(block), 1) for pos, block in model["blocks"]]
    labels2 = _labels(e2, len(model["common"]), inserts)
    first = {}
    for x, o in enumerate(origin):
        first.setdefault(o if o[0] == "C" else ("B", o[1], o[2], o[3]), x)
    out = []
    for label, idx, _ in run2["marks"]:
        if idx >= len(labels2):
            out.append((label, len(origin)))
            continue
        lab = labels2[idx]
        if lab[0] == "B" and lab[3] != 0:
            raise NotPeriodic("a phase mark falls inside a repeated block")
        out.append((label, first[lab] if lab[0] == "C" else first[("B", lab[1], 0, 0)]))
    return out


def plan(torch, R, factory, info):
    """See Note [Traced depth]: (L, k, P, the full model's layer signatures) for a
    model whose layers repeat enough to trace it at k, k + P and k + 2P; None (info["depth"]
    saying why) otherwise."""
    cfg = R["config"]
    L = R["hf_config"].get("num_hidden_layers")
    if not isinstance(L, int) or isinstance(L, bool) or L < 4:
        info["depth"] = "traced at full depth (no num_hidden_layers, or too few layers to repeat)"
        return None
    if cfg["checkpoint_layers"] > 0 or cfg["checkpoint_every"] > 1:
        info["depth"] = "traced at full depth (selective checkpointing treats layers apart)"
        return None
    try:
        sigs = signatures_on_meta(torch, R, factory)
    except Exception as e:  # a model that cannot be built on the meta device is traced whole
        info["depth"] = f"traced at full depth (its layers could not be read on the meta device: {short(str(e), 120)})"
        return None
    if len(sigs) != L:
        info["depth"] = f"traced at full depth ({len(sigs)} layers found for num_hidden_layers {L})"
        return None
    fp = period_of(sigs)
    if fp is None:
        info["depth"] = "traced at full depth (its layers do not repeat)"
        return None
    f, P = fp
    k = f + P + (L - f) % P
    if 3 * (k + P) >= L:  # the three shallow traces hold 3k + 3P layers
        info["depth"] = "traced at full depth (too few repeats to gain)"
        return None
    return L, k, P, sigs


def signatures_on_meta(torch, R, factory):
    """The full model's decoder layers, built on the meta device (nothing allocated, no PEFT). A
    model factory may make its tensors where it likes before it moves them (the engine tests'
    builds on the CPU): it builds on fake CPU tensors (a fake tensor is never on the meta device),
    so that an 8B shape never takes its bytes."""
    import contextlib
    from torch._subclasses.fake_tensor import FakeTensorMode
    with contextlib.nullcontext() if factory is None else FakeTensorMode():
        model = build_base(torch, R, torch.device("meta" if factory is None else "cpu"), factory, {})
        return [layer_signature(torch, layer) for layer in find_layers(model)]


def at_depth(R, k, L):
    R2 = dict(R)
    R2["hf_config"] = cut_config(R["hf_config"], k, L)
    return R2


def extrapolate(runs, L, k, P, sigs):
    """The full-depth run from the traces at k, k + P, k + 2P (Note [Traced depth])."""
    for d, run in zip((k, k + P, k + 2 * P), runs):
        if run["layers"] != sigs[:d]:
            raise NotPeriodic(f"the model at depth {d} is not the full model's first {d} layers")
    model = learn(runs[0], runs[2])
    one, _ = build(model, 1)
    if not same_stream(one, runs[1]["entries"]):
        raise NotPeriodic(f"the stream at depth {k + P} is not the one its neighbours predict")
    n = (L - k) // P
    entries, origin = build(model, n)
    marks_at = map_marks(runs[1], model, origin)
    run3 = runs[2]
    persistent, grads = {}, set()
    for e, o in zip(entries, origin):
        if e["action"] != "alloc":
            continue
        a3 = run3_addr(model, o)
        if a3 in run3["persistent"]:
            persistent[e["addr"]] = run3["persistent"][a3]
        if a3 in run3["grads"]:
            grads.add(e["addr"])
    live, marks, x, sizes = 0, [], 0, {}
    for label, idx in marks_at:
        while x < idx:
            e = entries[x]
            if e["action"] == "alloc":
                sizes[e["addr"]] = int(e["size"])
                live += int(e["size"])
            else:
                live -= sizes.pop(e["addr"], 0)
            x += 1
        marks.append((label, idx, live))
    a, b = runs[0], runs[1]

    def grow(x1, x2):
        return x1 + n * (x2 - x1)
    layout = dict(b["layout"])
    counts1 = {p["name"]: p["count"] for p in a["layout"]["parameters"]}
    layout["parameters"] = [dict(p, count=grow(counts1.get(p["name"], p["count"]), p["count"]))
                            for p in b["layout"]["parameters"]]
    return {"entries": entries, "marks": marks, "persistent": persistent, "grads": grads, "layout": layout,
            "total": grow(a["total"], b["total"]), "trainable": grow(a["trainable"], b["trainable"]), "vocab": b["vocab"],
            "build_s": sum(r["build_s"] for r in runs), "ops": sum(r["ops"] for r in runs),
            "late": sum(r["late"] for r in runs), "in_place": b["in_place"]}
