#!/usr/bin/env bash
# Builds the .deb from a build folder (default build/dev), checks what it holds and what it
# depends on, then (as root) installs it with apt, runs what it installed, and removes it again.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build/dev}"
cd "$BUILD"
rm -f headroom_*.deb
cpack -G DEB >/dev/null
deb="$(ls headroom_*.deb)"
echo "check-deb: built $deb ($(du -h "$deb" | cut -f1))"
contents="$(dpkg-deb -c "$deb")"
for f in usr/bin/headroom usr/bin/headroom-cli usr/bin/headroom-probe usr/lib/headroom/headroom-probe-torch.so \
         usr/share/headroom/headroom_engine.py usr/share/headroom/hrengine/main.py \
         usr/share/headroom/hrengine/vocabulary.py \
         usr/share/applications/headroom.desktop usr/share/icons/hicolor/scalable/apps/headroom.svg; do
    grep -q " \./$f\$" <<<"$contents" || { echo "check-deb: $deb lacks /$f" >&2; exit 1; }
done
depends="$(dpkg-deb -f "$deb" Depends)"
for d in libqt6widgets6 libqt6charts6 libyaml-cpp0.7 libcurl4 qt6-qpa-plugins; do
    grep -q "$d" <<<"$depends" || { echo "check-deb: Depends lacks $d: $depends" >&2; exit 1; }
done
if [ "$(id -u)" != 0 ]; then
    echo "check-deb: contents and dependencies are right; not root, so the install was not tried"
    exit 0
fi
apt-get install -y -qq "./$deb" >/dev/null
trap 'apt-get remove -y -qq headroom >/dev/null' EXIT
/usr/bin/headroom-cli --version
/usr/bin/headroom-cli estimate --model qwen2.5-0.5b --gpu a100-80 --check >/dev/null
out="$(mktemp -d)"
QT_QPA_PLATFORM=offscreen /usr/bin/headroom --screenshot "$out/shot.png" --size 1280x800 >/dev/null
test -s "$out/shot.png"
/usr/bin/headroom-probe --help >/dev/null
# The installed probe finds the installed transformers engine (share/headroom) on its own.
cat > "$out/request.json" <<'JSON'
{"schema_version": 1, "kind": "probe_request", "steps": 1, "device": "cpu",
 "model": {"headroom": {"id": "tiny"}, "config": {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
   "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256}},
 "config": {"precision": "fp32", "optimizer": "adamw", "finetune": "full", "micro_batch": 1, "seq_len": 16}}
JSON
# The installed probe loads its LibTorch engine (lib/headroom) and runs a real step on the CPU.
/usr/bin/headroom-probe --request "$out/request.json" --out "$out/result.json" >/dev/null
grep -q '"peak_allocated_bytes"' "$out/result.json"
# Past the engine-script search, it stops at the interpreter we name: proof that it found the script.
said="$(/usr/bin/headroom-probe --engine transformers --python /nonexistent/python3 --request "$out/request.json" 2>&1 || true)"
grep -q "no Python interpreter" <<<"$said" \
    || { echo "check-deb: the installed probe did not find its transformers engine: $said" >&2; exit 1; }
grep -q "^Exec=headroom" /usr/share/applications/headroom.desktop
rm -rf "$out"
echo "check-deb: $deb installs, runs (CLI, explorer offscreen, probe) and removes cleanly"
